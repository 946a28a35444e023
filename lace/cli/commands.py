"""The subcommands and their flags; handlers are imported only when their command runs."""

from __future__ import annotations

import argparse
import importlib
import math
from collections.abc import Callable
from typing import Any

Handler = Callable[[argparse.Namespace], int]


def lazy(target: str) -> Handler:
    """A handler that imports `module:function` when called, keeping `--help` fast."""
    module_name, _, function_name = target.partition(":")

    def handler(args: argparse.Namespace) -> int:
        function: Handler = getattr(importlib.import_module(module_name), function_name)
        return function(args)

    return handler


LARGEST_ID = 2**63 - 1
"""SQLite's largest integer: ids and counts past it cannot even be looked up."""
LARGEST_ROW_ID = 2**31 - 1
"""The largest id of a row (an approval request): PostgreSQL's INTEGER columns end there."""


def _whole_number(highest: int, expected: str = "a whole number") -> Callable[[str], int]:
    """An argparse type: a whole number from 1 to `highest`, else one line saying so."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not 1 <= value <= highest:
            raise argparse.ArgumentTypeError(f"must be from 1 to {highest}, got {text}")
        return value

    return parse


_positive_int = _whole_number(LARGEST_ID)
_row_id = _whole_number(LARGEST_ROW_ID)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, got {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {value}")
    return value


_port = _whole_number(65535, "a port number")
EXIT_STILL_RUNNING = 124
"""`lace wait --timeout`: the session still runs (as timeout(1) exits)."""


MAX_WORKERS = 64
MODEL_DEFAULT = ("(default: $LACE_MODEL, else the model setting of your config file or the "
                 "project's lace.toml, which lace config shows, else the offline demo model)")
"""Where the root's model comes from when `--model` is not given, for every `--model` help."""


_worker_count = _whole_number(MAX_WORKERS)


def add_workspace_flags(parser: argparse.ArgumentParser) -> None:
    """--workspace, --yes and --read-only, shared by `lace` and `lace run`."""
    parser.add_argument("--workspace", metavar="DIR", default=None,
                        help="the folder file tools and bash work in (default: this folder)")
    parser.add_argument("--yes", action="store_true",
                        help="allow every tool for this run, without asking")
    parser.add_argument("--read-only", action="store_true",
                        help="deny every tool that writes (file_write, file_edit, bash)")


Add = Callable[[str, str, str], argparse.ArgumentParser]
"""Adds a command: its name, its help (also its description) and its handler's `module:function`."""


def _adder(subparsers: Any, common: argparse.ArgumentParser | None = None) -> Add:
    """How commands are added to `subparsers`, each with the flags of `common` (`--db`; none
    for the commands that open no database)."""

    def add(name: str, help_text: str, target: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = subparsers.add_parser(
            name, help=help_text, description=help_text,
            parents=[] if common is None else [common])
        parser.set_defaults(handler=lazy(target))
        return parser

    return add


def register_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    """Add every subcommand to `subparsers`, in the order `lace --help` lists them."""
    add = _adder(subparsers, common)
    add_without_database = _adder(subparsers)
    _add_running_commands(add)
    _add_approval_commands(add)
    _add_lifetime_commands(add, common)
    _add_reading_commands(add)
    _add_task_commands(add, common)
    _add_trust_command(add_without_database)
    _add_setup_commands(add_without_database)
    _add_mcp_commands(add, common)
    _add_acp_command(add)
    _add_worktree_commands(add, common)
    _add_database_commands(add, common)


def _add_running_commands(add: Add) -> None:
    """run, wait, worker and web: the processes that run agents (or wait for them)."""
    run = add("run", "Start a session with PROMPT (or continue one) and run its agents until "
                     "they are quiet.", "lace.cli.run:run_command")
    run.add_argument("prompt", nargs="?", help="what the root agent should do")
    run.add_argument("--model", metavar="PROVIDER/MODEL",
                     help=f"the root's model {MODEL_DEFAULT}")
    run.add_argument("--continue", dest="continue_thread", metavar="THREAD_ID",
                     help="continue this thread's session: resume interrupted turns, deliver "
                          "pending messages, and send PROMPT (if given) to this thread")
    run.add_argument("--timeout", type=_positive_float, default=None, metavar="S",
                     help="stop after S seconds (running turns are marked interrupted)")
    run.add_argument("--json", action="store_true", help="print a JSON summary")
    run.add_argument("--workers", type=_worker_count, default=0, metavar="N",
                     help="also run the session's agents in N `lace worker` processes (for "
                          "fan-outs that keep one core busy); they end with the run")
    run.add_argument("--detach", action="store_true",
                     help="only start the session: print its id and exit, leaving its agents "
                          "to `lace worker` processes (see lace wait)")
    add_workspace_flags(run)

    wait = add("wait", "Wait, running no agent, until a session is quiet, then print the "
                       "root's answer as lace run does.", "lace.cli.wait:wait_command")
    wait.description = (f"{wait.description} Exit codes: lace run's (0 answered, 1 the root "
                        f"failed), {EXIT_STILL_RUNNING} still running at --timeout, 130 Ctrl+C "
                        "(the session is left as it is).")
    wait.add_argument("session", metavar="SESSION", help="the session's root thread id")
    wait.add_argument("--timeout", type=_positive_float, default=None, metavar="S",
                      help=f"give up after S seconds with exit code {EXIT_STILL_RUNNING}, "
                           "leaving the session running")
    wait.add_argument("--json", action="store_true",
                      help="print one JSON object: session, status, answer, task counts, "
                           "usage, exit code")

    worker = add("worker", "Run the agents of every session of the database (or of the named "
                           "ones) until SIGINT or SIGTERM, beside any other lace process.",
                 "lace.cli.worker:worker_command")
    worker.add_argument("--session", dest="sessions", action="append", metavar="ID",
                        help="run only this session's agents (repeat for more)")
    worker.add_argument("--max-agents", type=_positive_int, default=None, metavar="N",
                        help="run at most N turns at once; the rest are left to other "
                             "processes")
    worker.add_argument("--processes", type=_worker_count, default=1, metavar="N",
                        help="run N worker processes, forked after one start-up (for a host "
                             "with several cores); they stop together")
    worker.add_argument("--for-run", action="store_true", help=argparse.SUPPRESS)
    add_workspace_flags(worker)

    serve = add("web", "Serve the app to a browser (one app per open page), on this machine "
                       "only unless --allow-remote; pages need the token it prints "
                       "(or $LACE_WEB_TOKEN).", "lace.cli.web:web_command")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default: 127.0.0.1, this machine only)")
    serve.add_argument("--port", type=_port, default=8000, help="port (default: 8000)")
    serve.add_argument("--allow-remote", action="store_true",
                       help="allow a --host that other machines can reach: anyone who reaches "
                            "it can drive the agents")
    serve.add_argument("--public-url", metavar="URL",
                       help="the address browsers use (default: http://HOST:PORT); needed "
                            "with --host 0.0.0.0 or behind a proxy")
    serve.add_argument("--max-apps", type=_positive_int, default=None, metavar="N",
                       help="run at most N apps (open pages) at once (default: [web] max_apps, "
                            "4); past it a page says so")
    serve.add_argument("--model", metavar="PROVIDER/MODEL",
                       help=f"the root's model for new sessions {MODEL_DEFAULT}")
    serve.add_argument("--continue", dest="continue_thread", nargs="?", const="latest",
                       metavar="THREAD_ID",
                       help="each page reopens the last session (or THREAD_ID's)")
    add_workspace_flags(serve)


def _add_approval_commands(add: Add) -> None:
    """approve, deny and approvals: answering the tool calls agents wait on."""
    approve = add("approve", "Allow a tool call an agent waits on (see lace approvals).",
                  "lace.cli.approvals:approve_command")
    approve.add_argument("approval_id", type=_row_id, metavar="ID",
                         help="the request's number (lace approvals lists them)")
    approve.add_argument("--session", action="store_true",
                         help="allow this tool for the rest of the session")
    approve.add_argument("--json", action="store_true", help="print JSON")
    deny = add("deny", "Refuse a tool call an agent waits on.", "lace.cli.approvals:deny_command")
    deny.add_argument("approval_id", type=_row_id, metavar="ID",
                      help="the request's number (lace approvals lists them)")
    deny.add_argument("--json", action="store_true", help="print JSON")
    approvals = add("approvals", "List the approval requests that wait for an answer.",
                    "lace.cli.approvals:approvals_command")
    approvals.add_argument("--json", action="store_true", help="print JSON")
    approvals.add_argument("--full", action="store_true",
                           help="print each request's arguments whole, however long")


def _add_lifetime_commands(add: Add, common: argparse.ArgumentParser) -> None:
    """stop, resume and session end."""
    stop = add("stop", "Stop an agent and its whole subtree (their open tasks are blocked).",
               "lace.cli.lifetime:stop_command")
    stop.add_argument("thread_id", metavar="THREAD_ID",
                      help="the agent's thread (lace threads lists them)")
    stop.add_argument("--reason", default="stopped by the person", help="recorded and told")
    stop.add_argument("--json", action="store_true", help="print JSON")

    resume = add("resume", "Resume a stopped agent, then run its session until quiet.",
                 "lace.cli.lifetime:resume_command")
    resume.add_argument("thread_id", metavar="THREAD_ID", help="the stopped agent's thread")
    resume.add_argument("--timeout", type=_positive_float, default=None, metavar="S",
                        help="stop after S seconds, as lace run --timeout does")
    resume.add_argument("--json", action="store_true", help="print a JSON summary, as lace run "
                                                          "--json does")

    session = add("session", "Session actions.", "lace.cli.board:session_help_command")
    session_actions = session.add_subparsers(dest="session_command", metavar="ACTION",
                                             parser_class=type(session))
    end = session_actions.add_parser("end", help="Stop every agent of a session.",
                                     description="Stop every agent of a session and record "
                                                 "why; nothing is deleted.", parents=[common])
    end.set_defaults(handler=lazy("lace.cli.lifetime:session_end_command"))
    end.add_argument("root_id", metavar="ROOT_ID", help="the session (lace sessions lists them)")
    end.add_argument("--reason", default="ended by the person", help="recorded and told")
    end.add_argument("--json", action="store_true", help="print JSON")


def _add_reading_commands(add: Add) -> None:
    """sessions, follow, tasks, threads, cost, export, import and show: the board read (and
    carried) by hand."""
    sessions = add("sessions", "List the sessions, the newest first: id, status, when it "
                               "started (UTC), cost and the start of its prompt.",
                   "lace.cli.sessions:sessions_command")
    sessions.add_argument("text", nargs="?", metavar="TEXT",
                          help="only the sessions whose prompt (title) or id holds TEXT, in "
                               "any case")
    sessions.add_argument("--limit", type=_positive_int, default=None, metavar="N",
                          help="print at most N sessions")
    sessions.add_argument("--json", action="store_true", help="print JSON")

    follow = add("follow", "Print a session's events as they happen (its helpers' too), from "
                           "its first, until it is quiet; it may start before any process "
                           "runs the session.", "lace.cli.sessions:follow_command")
    follow.description = (f"{follow.description} Exit codes: 0 once the session is quiet, "
                          "130 Ctrl+C (the session is left as it is).")
    follow.add_argument("session", metavar="SESSION", help="the session's root thread id")
    follow.add_argument("--json", action="store_true",
                        help="print one JSON object per event, a line each")

    tasks = add("tasks", "Print the task board of a session (open tasks unless --all).",
                "lace.cli.board:tasks_command")
    tasks.add_argument("--session", metavar="ID", help="root thread id (default: the latest)")
    tasks.add_argument("--all", action="store_true", help="include completed and archived tasks")
    tasks.add_argument("--limit", type=_positive_int, default=None, metavar="N",
                       help="print at most N tasks")
    tasks.add_argument("--json", action="store_true", help="print JSON")

    threads = add("threads", "Print the thread tree of a session with status, task and usage.",
                  "lace.cli.board:threads_command")
    threads.add_argument("--session", metavar="ID", help="root thread id (default: the latest)")
    threads.add_argument("--json", action="store_true", help="print JSON")

    cost = add("cost", "Print a session's tokens, cost and model calls from llm_calls, per "
                       "thread (with subtree totals), model or day.", "lace.cli.cost:cost_command")
    cost.add_argument("--session", metavar="ID", help="root thread id (default: the latest)")
    cost.add_argument("--by", choices=("thread", "model", "day"), default="thread",
                      help="one row per thread (default), model or day (UTC)")
    cost.add_argument("--json", action="store_true", help="print JSON")

    export = add("export", "Write a whole session (threads, conversations, tasks with notes, "
                           "agents, usage) as one JSON document or a Markdown transcript; "
                           "credential values are masked.", "lace.cli.transfer:export_command")
    export.add_argument("session", metavar="SESSION", help="the session's root thread id")
    export.add_argument("--format", choices=("json", "markdown"), default="json",
                        help="json (for lace import; default) or markdown (to read)")
    export.add_argument("-o", "--output", metavar="FILE",
                        help="write FILE (readable by you only) instead of stdout")
    import_ = add("import", "Restore a session from a JSON export into the database (under new "
                            "ids where its own are taken).", "lace.cli.transfer:import_command")
    import_.add_argument("file", metavar="FILE", help="a file written by lace export")
    import_.add_argument("--json", action="store_true", help="print JSON")

    show = add("show", "Print one thread's conversation.", "lace.cli.board:show_command")
    show.add_argument("thread_id", metavar="THREAD_ID",
                      help="a session's id or one of its threads (lace threads lists them)")
    show.add_argument("--json", action="store_true", help="print JSON")


def _add_task_commands(add: Add, common: argparse.ArgumentParser) -> None:
    """task add, note and complete: the board written as the person."""
    task = add("task", "Act on the board as the person (actor 'human').",
               "lace.cli.board:task_help_command")
    task_actions = task.add_subparsers(dest="task_command", metavar="ACTION",
                                       parser_class=type(task))

    add_task_action = _adder(task_actions, common)
    task_add = add_task_action("add", "Create a task (in the latest session unless --session; "
                                      "in a new one when there is none).",
                               "lace.cli.board:task_add_command")
    task_add.add_argument("title", help="what the task is, in a few words")
    task_add.add_argument("--prompt", help="instructions for whoever does it (default: the title)")
    task_add.add_argument("--description", help="context for people reading the board")
    task_add.add_argument("--priority", choices=("high", "medium", "low"), default="medium",
                          help="(default: medium)")
    task_add.add_argument("--assign", dest="assigned_to", metavar="WHO",
                          help="new:provider/model, a thread id of the session, or human "
                               "(default: the session's root once you have written to it, "
                               "unless it is stopped, failed or imported and not "
                               "resumed; else nobody)")
    task_add.add_argument("--blocked-by", dest="blocked_by", action="append", metavar="ID",
                          help="a task it waits for (repeatable): it starts when they are "
                               "completed")
    task_add.add_argument("--session", metavar="ID",
                          help="root thread id (default: the --blocked-by task's, else the "
                               "latest)")
    task_add.add_argument("--json", action="store_true", help="print JSON")

    task_note = add_task_action("note", "Add a note to a task.", "lace.cli.board:task_note_command")
    task_note.add_argument("task_id", help="a task you created or that is assigned to human")
    task_note.add_argument("note", help="what to add")
    task_note.add_argument("--json", action="store_true", help="print JSON")

    task_complete = add_task_action("complete", "Complete a task with a result message.",
                                    "lace.cli.board:task_complete_command")
    task_complete.add_argument("task_id", help="a task you created or that is assigned to human")
    task_complete.add_argument("message", help="the result its creator receives")
    task_complete.add_argument("--json", action="store_true", help="print JSON")


def _add_trust_command(add: Add) -> None:
    """trust: the person's yes to a workspace's own configuration."""
    trust = add("trust", "Show the whole configuration a workspace brings (lace.toml, "
                         ".mcp.json), ask, and trust it as it is now: until then lace ignores "
                         "it, and a change asks again.", "lace.cli.trust:trust_command")
    trust.add_argument("path", nargs="?", metavar="PATH",
                       help="the workspace folder (default: the current one)")
    trust.add_argument("--yes", action="store_true",
                       help="trust it without asking (after showing it)")
    trust.add_argument("--json", action="store_true",
                       help="print JSON (the configuration shown goes to stderr)")


def _add_setup_commands(add: Add) -> None:
    """config, hooks, completion and keys: the settings in force and where each came from,
    the hooks in effect, shell completion, stored keys (none opens a database)."""
    config = add("config", "Print the settings in force, merged from your own config file, "
                           "$LACE_HOME/config.toml and the project's lace.toml, each value with "
                           "where it came from.", "lace.cli.configuration:config_command")
    config.add_argument("--workspace", metavar="DIR", default=None,
                        help="the workspace whose project lace.toml counts (default: this "
                             "folder)")
    config.add_argument("--json", action="store_true", help="print JSON")

    hooks = add("hooks", "List the hooks in effect ([[hooks.EVENT]] in your config file and "
                         "a trusted lace.toml), each with the file it comes from.",
                "lace.cli.hooks:hooks_command")
    hooks.add_argument("--workspace", metavar="DIR", default=None,
                       help="the workspace whose project lace.toml counts (default: this "
                            "folder)")
    hooks.add_argument("--json", action="store_true", help="print JSON")

    completion = add("completion", "Print the shell code that completes lace's commands and "
                                   "options: add eval \"$(lace completion bash)\" to ~/.bashrc "
                                   "(zsh: ~/.zshrc; fish: lace completion fish | source).",
                     "lace.cli.completion:completion_command")
    completion.add_argument("shell", choices=("bash", "zsh", "fish"), metavar="SHELL",
                            help="bash, zsh or fish")

    keys = add("keys", "Provider keys kept in lace's home (private to you), used when the "
                       "environment has none.", "lace.cli.keys:keys_help_command")
    key_actions = keys.add_subparsers(dest="keys_command", metavar="ACTION",
                                      parser_class=type(keys))
    add_key_action = _adder(key_actions)
    key_set = add_key_action("set", "Store PROVIDER's key: typed at a hidden prompt, or one "
                                    "line from stdin when it is not a terminal.",
                             "lace.cli.keys:keys_set_command")
    key_set.add_argument("provider", metavar="PROVIDER", help="openai, anthropic, gemini, ...")
    key_set.add_argument("--json", action="store_true", help="print JSON")
    key_list = add_key_action("list", "List the providers with a stored key (never the keys).",
                              "lace.cli.keys:keys_list_command")
    key_list.add_argument("--json", action="store_true", help="print JSON")


def _add_mcp_commands(add: Add, common: argparse.ArgumentParser) -> None:
    """mcp list and mcp serve."""
    mcp = add("mcp", "The Model Context Protocol: the servers agents use (list) and the board "
              "served to MCP clients (serve).", "lace.cli.mcp_list:mcp_help_command")
    mcp_actions = mcp.add_subparsers(dest="mcp_command", metavar="ACTION",
                                     parser_class=type(mcp))
    mcp_list = mcp_actions.add_parser(
        "list", help="Start each configured MCP server and list its tools.",
        description="Start each MCP server of [mcp_servers] and the workspace's .mcp.json as "
                    "a run would, and print whether it started and its tools, each with its "
                    "policy; exit 1 when a server does not start.")
    mcp_list.set_defaults(handler=lazy("lace.cli.mcp_list:mcp_list_command"))
    mcp_list.add_argument("--json", action="store_true", help="print JSON")
    add_workspace_flags(mcp_list)
    serve = mcp_actions.add_parser(
        "serve", parents=[common],
        help="Serve a session's board to an MCP client (Claude Code, Codex, Cursor) as the "
             "person, and run the agents its tasks spawn.",
        description="Serve a session's board to an MCP client as the person (actor 'human'): "
                    "the task tools, task_wait, threads_list, thread_read and agent_stop, and "
                    "the resources lace://board and lace://thread/{id}. Serves over stdio "
                    "unless --http; runs the agents its tasks spawn until the client leaves.")
    serve.set_defaults(handler=lazy("lace.cli.mcp_serve:mcp_serve_command"))
    serve.add_argument("--session", metavar="ID",
                       help="the session to serve (default: the latest; with none, the first "
                            "task_create starts one)")
    serve.add_argument("--http", metavar="HOST:PORT",
                       help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio "
                            "(HOST: 127.0.0.1 or another loopback address); clients send "
                            "'Authorization: Bearer TOKEN', the token it prints (or "
                            "$LACE_MCP_TOKEN)")
    serve.add_argument("--allow-remote", action="store_true",
                       help="let --http listen on an address other machines can reach")
    add_workspace_flags(serve)


def _add_acp_command(add: Add) -> None:
    """acp: lace as an agent for editors."""
    acp = add("acp", "Serve the Agent Client Protocol on stdin and stdout: lace as the agent "
                     "of an editor (Zed, JetBrains, Neovim), each editor session a lace "
                     "session working in the editor's folder.", "lace.cli.acp_serve:acp_command")
    acp.add_argument("--model", metavar="PROVIDER/MODEL",
                     help=f"the root's model {MODEL_DEFAULT}")
    add_workspace_flags(acp)


def _add_worktree_commands(add: Add, common: argparse.ArgumentParser) -> None:
    """merge, worktrees and worktrees prune: the helpers' git worktrees."""
    merge = add("merge", "Merge a helper's worktree branch (lace/THREAD_ID) into the branch it "
                         "started from; a conflict changes nothing.",
                "lace.cli.worktrees:merge_command")
    merge.add_argument("thread_id", metavar="THREAD_ID",
                       help="the helper whose branch to merge (lace worktrees lists them)")
    merge.add_argument("--squash", action="store_true", help="one plain commit, no merge commit")
    merge.add_argument("--json", action="store_true", help="print JSON")

    worktrees = add("worktrees", "List the helpers' git worktrees with their status.",
                    "lace.cli.worktrees:worktrees_command")
    worktrees.add_argument("--all", action="store_true", help="include pruned ones")
    worktrees.add_argument("--json", action="store_true", help="print JSON")
    worktree_actions = worktrees.add_subparsers(dest="worktrees_command", metavar="ACTION",
                                                parser_class=type(worktrees))
    prune = worktree_actions.add_parser(
        "prune", help="Remove merged and abandoned worktrees and their branches.",
        description="Remove merged and abandoned worktrees and their branches; one with "
                    "unmerged commits or uncommitted files is kept unless --force, and one "
                    "a helper still works in is always kept (lace stop it first).",
        parents=[common])
    prune.set_defaults(handler=lazy("lace.cli.worktrees:prune_command"))
    prune.add_argument("--force", action="store_true",
                       help="remove unmerged work too (it is deleted); never a worktree a "
                            "helper still works in")
    prune.add_argument("--json", action="store_true", help="print JSON")


def _add_database_commands(add: Add, common: argparse.ArgumentParser) -> None:
    """db upgrade and db path."""
    database = add("db", "Database maintenance.", "lace.cli.board:db_help_command")
    db_actions = database.add_subparsers(dest="db_command", metavar="ACTION",
                                         parser_class=type(database))
    add_db_action = _adder(db_actions, common)
    upgrade = add_db_action("upgrade", "Migrate the database to the newest schema.",
                            "lace.cli.board:db_upgrade")
    upgrade.add_argument("--json", action="store_true", help="print JSON")
    path = add_db_action("path", "Print which database lace uses.", "lace.cli.board:db_path")
    path.add_argument("--json", action="store_true", help="print JSON")


EXAMPLES: dict[str, tuple[str, ...]] = {
    "lace": ("lace", "lace --model anthropic/claude-sonnet-4-5", "lace --continue"),
    "lace run": ('lace run "Plan a small launch: write the announcement and list the risks."',
                 'lace run --detach "Plan a small launch: write the announcement."',
                 'lace run --continue lace_20261122_ab12cd "Now list the risks too."'),
    "lace worker": ("lace worker --session lace_20261122_ab12cd --max-agents 8",),
    "lace wait": ("lace wait lace_20261122_ab12cd",
                  "lace wait lace_20261122_ab12cd --timeout 600 --json"),
    "lace web": ("lace web", "lace web --port 8080 --model openai/gpt-4o-mini"),
    "lace approve": ("lace approve 3", "lace approve 3 --session"),
    "lace deny": ("lace deny 3",),
    "lace approvals": ("lace approvals --full",),
    "lace stop": ('lace stop lace_20261122_ab12cd.1 --reason "wrong direction"',),
    "lace resume": ("lace resume lace_20261122_ab12cd.1",),
    "lace session": ('lace session end lace_20261122_ab12cd --reason "done for today"',),
    "lace session end": ('lace session end lace_20261122_ab12cd --reason "done for today"',),
    "lace sessions": ("lace sessions", "lace sessions launch --limit 5",
                      "lace sessions --json"),
    "lace follow": ("lace follow lace_20261122_ab12cd",
                    "lace follow lace_20261122_ab12cd --json"),
    "lace tasks": ("lace tasks", "lace tasks --all --json"),
    "lace threads": ("lace threads --session lace_20261122_ab12cd",),
    "lace show": ("lace show lace_20261122_ab12cd.1",),
    "lace task": ('lace task add "Sign off the launch" --assign human',),
    "lace task add": ('lace task add "Sign off the launch" --assign human',
                      'lace task add "Check the links" --assign new:openai/gpt-4o-mini'),
    "lace task note": ('lace task note task_20261122_0a1b2c "The date moved to Friday."',),
    "lace task complete": ('lace task complete task_20261122_0a1b2c "Signed off."',),
    "lace cost": ("lace cost", "lace cost --by model --json"),
    "lace export": ("lace export lace_20261122_ab12cd -o launch.json",
                    "lace export lace_20261122_ab12cd --format markdown -o launch.md"),
    "lace import": ("lace import launch.json --db ./team.db",),
    "lace trust": ("lace trust", "lace trust ~/src/project --yes"),
    "lace config": ("lace config", "lace config --workspace ~/src/project --json"),
    "lace hooks": ("lace hooks", "lace hooks --workspace ~/src/project --json"),
    "lace completion": ("lace completion bash", "lace completion zsh", "lace completion fish"),
    "lace keys": ("lace keys set anthropic", "lace keys list"),
    "lace keys set": ("lace keys set openai",),
    "lace keys list": ("lace keys list", "lace keys list --json"),
    "lace mcp": ("lace mcp list", "lace mcp serve"),
    "lace mcp list": ("lace mcp list --json",),
    "lace mcp serve": ("lace mcp serve",
                       "lace mcp serve --http 127.0.0.1:8765 --session lace_20261122_ab12cd"),
    "lace acp": ("lace acp", "lace acp --model openai/gpt-4o --db ~/.lace/editor.db"),
    "lace merge": ("lace merge lace_20261122_ab12cd.1",
                   "lace merge lace_20261122_ab12cd.2 --squash"),
    "lace worktrees": ("lace worktrees", "lace worktrees prune"),
    "lace worktrees prune": ("lace worktrees prune", "lace worktrees prune --force"),
    "lace db": ("lace db path",),
    "lace db upgrade": ("lace db upgrade --db ./team.db",),
    "lace db path": ("lace db path",),
}
"""Each command's examples, shown at the end of its --help (a test runs every one through
the parser)."""


class HelpWithExamples(argparse.HelpFormatter):
    """Wraps descriptions as usual and keeps the examples one per line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers of a parser's subcommands."""
    return [choice for action in parser._actions
            if isinstance(action, argparse._SubParsersAction)
            for choice in action.choices.values()]


SESSION_ARGUMENTS = frozenset({"session", "sessions", "root_id"})
"""The destinations of arguments that name a session: a TAB offers the database's sessions."""
THREAD_ARGUMENTS = frozenset({"thread_id", "continue_thread"})
"""The destinations of arguments that name a thread: a TAB offers sessions, then threads."""


def _completer(name: str) -> Callable[..., list[str]]:
    """argcomplete's completer `lace.cli.completion.<name>`, imported at the first TAB."""

    def complete(prefix: str, parsed_args: argparse.Namespace, **_kwargs: Any) -> list[str]:
        from lace.cli import completion

        found: list[str] = getattr(completion, name)(prefix, parsed_args)
        return found

    return complete


def add_id_completers(parser: argparse.ArgumentParser) -> None:
    """Make a TAB complete session and thread ids wherever one is expected, and models after
    `--model`, all the way down the tree."""
    for action in parser._actions:
        if action.nargs == 0:  # a flag such as `lace approve --session`
            continue
        if action.dest in SESSION_ARGUMENTS:
            action.completer = _completer("session_ids")  # type: ignore[attr-defined]
        elif action.dest in THREAD_ARGUMENTS:
            action.completer = _completer("thread_ids")  # type: ignore[attr-defined]
        elif action.dest == "model":
            action.completer = _completer("models")  # type: ignore[attr-defined]
    for child in subcommands(parser):
        add_id_completers(child)


def add_examples(parser: argparse.ArgumentParser) -> None:
    """Put each command's examples at the end of its help, all the way down the tree."""
    parser.formatter_class = HelpWithExamples
    parser.epilog = "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[parser.prog])
    for child in subcommands(parser):
        add_examples(child)
