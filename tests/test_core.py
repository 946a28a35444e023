"""The pure core: assignee grammar, transitions and ids."""

from __future__ import annotations

import pytest

from lace.core import ids
from lace.core.assignee import HumanAssignee, NewAgentSpec, ThreadAssignee, parse_assignee
from lace.core.errors import InvalidAssigneeError, InvalidTransitionError
from lace.core.shown import shown_briefly
from lace.core.tasks import STATUSES, TRANSITIONS, check_transition


@pytest.mark.parametrize(("text", "profile", "provider", "model"), [
    ("new:openai/gpt-4o", None, "openai", "gpt-4o"),
    ("new:openrouter/anthropic/claude-3.5-sonnet", None, "openrouter",
     "anthropic/claude-3.5-sonnet"),
    ("new:ollama/llama3:8b", None, "ollama", "llama3:8b"),
    ("new:coder:openai/gpt-4o", "coder", "openai", "gpt-4o"),
    ("new:coder:ollama/llama3:8b", "coder", "ollama", "llama3:8b"),
    ("new:coder", "coder", None, None),
])
def test_new_specs_parse(text: str, profile: str | None, provider: str | None,
                         model: str | None) -> None:
    assert parse_assignee(text) == NewAgentSpec(text, profile, provider, model)


def test_human_and_thread_ids_parse() -> None:
    assert parse_assignee("human") == HumanAssignee()
    assert parse_assignee("lace_20261122_ab12cd.2.1") == ThreadAssignee("lace_20261122_ab12cd.2.1")


@pytest.mark.parametrize("text", [
    "new:", "new:/gpt-4o", "new:openai/", "new:a:b:c/d", "new:coder:", "bob", "Human",
    "lace_20261122_ab12cd.0", "new:open ai/gpt", "new:openai/ gpt",
])
def test_malformed_assignees_name_the_expected_forms(text: str) -> None:
    with pytest.raises(InvalidAssigneeError, match="Expected new:provider/model"):
        parse_assignee(text)


@pytest.mark.parametrize("current", STATUSES)
@pytest.mark.parametrize("wanted", STATUSES)
def test_transition_table(current: str, wanted: str) -> None:
    if wanted in TRANSITIONS[current]:
        check_transition("t", current, wanted)
        return
    with pytest.raises(InvalidTransitionError) as caught:
        check_transition("t", current, wanted)
    allowed = TRANSITIONS[current]
    assert all(move in str(caught.value) for move in allowed)


def test_the_transition_table_is_the_documented_one() -> None:
    assert TRANSITIONS == {
        "pending": ("in_progress", "blocked", "completed", "archived"),
        "in_progress": ("pending", "blocked", "completed"),
        "blocked": ("pending", "in_progress", "completed"),
        "completed": ("archived",),
        "archived": (),
    }


def test_completed_task_suggests_a_follow_up() -> None:
    with pytest.raises(InvalidTransitionError, match="follow-up"):
        check_transition("t", "completed", "in_progress")


def test_id_shapes() -> None:
    root = ids.new_root_thread_id()
    assert ids.is_thread_id(root)
    assert ids.ROOT_THREAD_PATTERN and root.startswith("lace_")
    child = ids.child_thread_id(ids.child_thread_id(root, 2), 11)
    assert child == f"{root}.2.11" and ids.is_thread_id(child)
    assert ids.child_index(child) == 11 and ids.child_index(root) is None
    assert ids.root_of(child) == root and ids.depth_of(child) == 2
    assert ids.TASK_ID_RE.match(ids.new_task_id())



def test_a_listing_cuts_a_text_only_where_the_cut_is_shorter() -> None:
    assert shown_briefly("x" * 63, 60) == "x" * 63
    assert shown_briefly("x" * 200, 60) == "x" * 60 + "… (140 more characters)"


def test_settled_tasks_are_named_by_status_a_few_each_and_the_rest_counted() -> None:
    from lace.core.lines import settled_line
    from lace.core.shown import named_few

    assert settled_line({"t1": "completed"}) == "t1 completed"
    assert settled_line({f"t{n}": "completed" for n in range(1, 8)} | {"b1": "blocked"}) == \
        "t1, t2, t3 and 4 more completed; b1 blocked"
    assert named_few(["a", "b"], 2) == "a, b" and named_few(["a", "b", "c"], 2) == "a, b and 1 more"
