"""The peers' side of `benchmarks.peers`: one fan-out with pydantic-ai, the OpenAI Agents SDK or
a plain `AsyncOpenAI` loop, run as a script by the peer venv's Python (or, for `plain`, by any
Python with the `openai` package). It never imports lace.

    python benchmarks/peer_systems.py SYSTEM --tasks K --base-url URL
    python benchmarks/peer_systems.py --versions

A root agent hands out K jobs ("Fan out K jobs."); each helper makes a note call and a
completion call whose result is its output; the root then answers. What the model says comes
from the benchmark's server, which reads the model name (`root-pydantic`, `worker-agents`,
...) and the conversation. Prints one JSON line: the root's output and how many notes and
completions the helpers' tools recorded.
"""

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

SYSTEMS = ("pydantic-ai", "openai-agents", "plain")
MODEL_SUFFIX = {"pydantic-ai": "pydantic", "openai-agents": "agents", "plain": "plain"}
PACKAGES = ("openai", "pydantic-ai-slim", "openai-agents")
API_KEY = "sk-bench-not-a-real-key"
ROOT_INSTRUCTIONS = "You are the root agent. Hand each job to a helper with run_job, then sum up."
WORKER_INSTRUCTIONS = "You are a helper. Record a note with `note`, then finish with `complete`."


@dataclass
class Tally:
    """What the helpers' tools did, counted in this process."""

    notes: list[str] = field(default_factory=list)
    completions: list[str] = field(default_factory=list)


def root_prompt(tasks: int) -> str:
    return f"Fan out {tasks} jobs."


async def run_pydantic_ai(tasks: int, base_url: str, tally: Tally) -> str:
    """pydantic-ai's agent delegation: the root's `run_job` tool runs the worker agent with
    the root's usage; the worker's `complete` output tool ends its run (two model calls)."""
    from pydantic import BaseModel
    from pydantic_ai import Agent, RunContext, ToolOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    class Completion(BaseModel):
        result: str

    provider = OpenAIProvider(base_url=base_url, api_key=API_KEY)
    unlimited = UsageLimits(request_limit=None)  # the default (50) counts every helper's calls

    def note(note: str) -> str:
        """Record a progress note on your job."""
        tally.notes.append(note)
        return "Noted."

    worker: Any = Agent(OpenAIChatModel("worker-pydantic", provider=provider),
                        instructions=WORKER_INSTRUCTIONS, tools=[note],
                        output_type=ToolOutput(Completion, name="complete"))

    async def run_job(ctx: RunContext[None], job: str) -> str:
        """Hand one job to a helper and return its result."""
        result = await worker.run(job, usage=ctx.usage, usage_limits=unlimited)
        tally.completions.append(result.output.result)
        return str(result.output.result)

    root: Any = Agent(OpenAIChatModel("root-pydantic", provider=provider),
                      instructions=ROOT_INSTRUCTIONS, tools=[run_job])
    answer = await root.run(root_prompt(tasks), usage_limits=unlimited)
    return str(answer.output)


async def run_openai_agents(tasks: int, base_url: str, tally: Tally) -> str:
    """The OpenAI Agents SDK: the worker as the root's tool (`as_tool`), Chat Completions
    models on the server, tracing off; the worker stops at its `complete` tool (two calls)."""
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        StopAtTools,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key=API_KEY)

    def note(note: str) -> str:
        """Record a progress note on your job."""
        tally.notes.append(note)
        return "Noted."

    def complete(result: str) -> str:
        """Finish your job with its result."""
        tally.completions.append(result)
        return result

    worker: Any = Agent(name="worker", instructions=WORKER_INSTRUCTIONS,
                        model=OpenAIChatCompletionsModel("worker-agents", openai_client=client),
                        tools=[function_tool(note), function_tool(complete)],
                        tool_use_behavior=StopAtTools(stop_at_tool_names=["complete"]))
    root: Any = Agent(name="root", instructions=ROOT_INSTRUCTIONS,
                      model=OpenAIChatCompletionsModel("root-agents", openai_client=client),
                      tools=[worker.as_tool(tool_name="run_job",
                                            tool_description="Hand one job to a helper.")])
    answer = await Runner.run(root, root_prompt(tasks))
    return str(answer.final_output)


def function(name: str, description: str, argument: str) -> dict[str, Any]:
    """A chat-completions tool taking one string argument."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {argument: {"type": "string"}},
                       "required": [argument], "additionalProperties": False}}}


ROOT_TOOLS = [function("run_job", "Hand one job to a helper.", "job")]
WORKER_TOOLS = [function("note", "Record a progress note on your job.", "note"),
                function("complete", "Finish your job with its result.", "result")]


async def run_plain(tasks: int, base_url: str, tally: Tally) -> str:
    """No framework: the root's call, every helper's two calls under `asyncio.gather` (tool
    results appended to its conversation), then the root's call with every result."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key=API_KEY)

    async def call(model: str, messages: list[dict[str, Any]],
                   tools: list[dict[str, Any]]) -> dict[str, Any]:
        response = await client.chat.completions.create(
            model=model, messages=messages, tools=tools)  # type: ignore[arg-type]
        message: dict[str, Any] = response.choices[0].message.model_dump(exclude_none=True)
        messages.append(message)
        return message

    async def helper(job: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "system", "content": WORKER_INSTRUCTIONS},
                                          {"role": "user", "content": job}]
        while True:
            message = await call("worker-plain", messages, WORKER_TOOLS)
            for tool_call in message.get("tool_calls") or []:
                arguments = json.loads(tool_call["function"]["arguments"])
                if tool_call["function"]["name"] == "complete":
                    tally.completions.append(arguments["result"])
                    return str(arguments["result"])
                tally.notes.append(arguments["note"])
                messages.append({"role": "tool", "tool_call_id": tool_call["id"],
                                 "content": "Noted."})
            if not message.get("tool_calls"):
                raise RuntimeError(f"a helper answered without completing: {message}")

    root: list[dict[str, Any]] = [{"role": "system", "content": ROOT_INSTRUCTIONS},
                                  {"role": "user", "content": root_prompt(tasks)}]
    first = await call("root-plain", root, ROOT_TOOLS)
    calls = first.get("tool_calls") or []
    results = await asyncio.gather(*(helper(json.loads(tool_call["function"]["arguments"])["job"])
                                     for tool_call in calls))
    root.extend({"role": "tool", "tool_call_id": tool_call["id"], "content": result}
                for tool_call, result in zip(calls, results, strict=True))
    final = await call("root-plain", root, ROOT_TOOLS)
    return str(final.get("content"))


RUNNERS = {"pydantic-ai": run_pydantic_ai, "openai-agents": run_openai_agents,
           "plain": run_plain}


def versions() -> dict[str, str | None]:
    """The installed version of each peer package (None when absent)."""
    found: dict[str, str | None] = {}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("system", nargs="?", choices=SYSTEMS)
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--base-url", default="")
    parser.add_argument("--versions", action="store_true", help="print the peer packages' "
                        "versions as JSON and exit")
    args = parser.parse_args(argv)
    if args.versions:
        print(json.dumps({"python": sys.version.split()[0], **versions()}))
        return
    if args.system is None or not args.base_url:
        parser.error("SYSTEM and --base-url are required")
    tally = Tally()
    output = asyncio.run(RUNNERS[args.system](args.tasks, args.base_url, tally))
    print(json.dumps({"system": args.system, "output": output, "notes": len(tally.notes),
                      "completions": len(tally.completions)}))


if __name__ == "__main__":
    main()
