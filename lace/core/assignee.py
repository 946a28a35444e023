"""The `assigned_to` grammar: `new:` agent specs, existing thread ids and `human`."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from lace.core.errors import InvalidAssigneeError
from lace.core.ids import is_thread_id
from lace.core.records import AgentPlan

HUMAN = "human"
NEW_PREFIX = "new:"
ACP_PREFIX = "acp:"
ACP_PROVIDER = "acp"
"""The provider of an agent that is an external ACP agent (`acp:NAME`): its model is NAME."""
EXPECTED_FORMS = (
    "Expected new:provider/model (e.g. new:openai/gpt-4o), new:<profile>:<provider>/<model>, "
    "new:<profile>, acp:<name> (an ACP agent of [acp_agents]), an existing thread id of this "
    "session, or 'human'"
)
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A provider or profile name, matched whole (`fullmatch`: `$` would let a final newline in)."""


@dataclass(frozen=True)
class NewAgentSpec:
    """A request to spawn a new agent; `provider`/`model` are None for a bare profile."""

    text: str
    profile: str | None
    provider: str | None
    model: str | None

    @property
    def model_name(self) -> str | None:
        """The `provider/model` string a model call uses, if the spec names one."""
        return f"{self.provider}/{self.model}" if self.provider else None


@dataclass(frozen=True)
class ThreadAssignee:
    """An existing agent thread."""

    thread_id: str


@dataclass(frozen=True)
class HumanAssignee:
    """The person at the keyboard."""


Assignee = NewAgentSpec | ThreadAssignee | HumanAssignee
Assignment = AgentPlan | ThreadAssignee | HumanAssignee
"""What the store applies: a planned new agent, an existing agent, or the person."""


def assignee_text(assignment: ThreadAssignee | HumanAssignee) -> str:
    """The `assigned_to` column value of an existing assignee."""
    return assignment.thread_id if isinstance(assignment, ThreadAssignee) else HUMAN


def _visible(text: str) -> bool:
    """Whether every character shows as itself: no space, control, bidi or other format
    character, and no lone surrogate (Unicode categories Z* and C*)."""
    return all(unicodedata.category(character)[0] not in "CZ" for character in text)


def parse_model(text: str) -> tuple[str, str]:
    """Split `provider/model` (the model may hold more `/` and `:`), or raise: no part between
    slashes is empty, and the model is visible characters only (a name is shown in every
    listing and becomes the agent's name)."""
    provider, slash, model = text.partition("/")
    if (not slash or not _NAME_RE.fullmatch(provider) or not _visible(model)
            or "" in model.split("/")):
        raise InvalidAssigneeError(
            "Expected provider/model (e.g. openai/gpt-4o): no empty part between slashes and "
            f"no space or control character, got {text!r}")
    return provider, model


def parse_new_spec(text: str) -> NewAgentSpec:
    """Parse the part of a `new:` assignee after the prefix."""
    rest = text[len(NEW_PREFIX) :]
    first_slash = rest.find("/")
    head = rest if first_slash < 0 else rest[:first_slash]
    profile: str | None = None
    if ":" in head:
        profile, _, _ = head.partition(":")
        rest = rest[len(profile) + 1 :]
        if not _NAME_RE.fullmatch(profile):
            raise InvalidAssigneeError(
                f"Bad profile name {profile!r} in {text!r}. {EXPECTED_FORMS}.")
    if first_slash < 0 and profile is None:
        if not _NAME_RE.fullmatch(rest):
            raise InvalidAssigneeError(f"Malformed assignee {text!r}. {EXPECTED_FORMS}.")
        return NewAgentSpec(text=text, profile=rest, provider=None, model=None)
    try:
        provider, model = parse_model(rest)
    except InvalidAssigneeError:
        raise InvalidAssigneeError(
            f"Malformed assignee {text!r}: the model needs a provider, no empty part between "
            f"slashes and no space or control character. {EXPECTED_FORMS}.") from None
    return NewAgentSpec(text=text, profile=profile, provider=provider, model=model)


def parse_assignee(text: str) -> Assignee:
    """Parse an `assigned_to` value; callers check that providers, profiles and threads exist."""
    if text == HUMAN:
        return HumanAssignee()
    if text.startswith(NEW_PREFIX):
        return parse_new_spec(text)
    if text.startswith(ACP_PREFIX):
        name = text[len(ACP_PREFIX):]
        if not _NAME_RE.fullmatch(name):
            raise InvalidAssigneeError(f"Malformed assignee {text!r}: acp:NAME names an agent "
                                       "of [acp_agents] (letters, digits, '.', '_', '-').")
        return NewAgentSpec(text=text, profile=None, provider=ACP_PROVIDER, model=name)
    if is_thread_id(text):
        return ThreadAssignee(text)
    raise InvalidAssigneeError(f"Malformed assignee {text!r}. {EXPECTED_FORMS}.")
