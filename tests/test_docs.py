"""The README stays a front door: short, linking every page of docs/, with links that lead
somewhere and commands at a prompt that the parser accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from lace.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def relative_links(page: Path) -> list[str]:
    """Every link of a Markdown page that is not a web address, outside code blocks."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return [target for target in LINK.findall(text)
            if not re.match(r"[a-z]+:", target)]


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of a page."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(README.read_text().splitlines()) <= MAX_README_LINES


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {target.split("#")[0] for target in relative_links(README)}
    assert {f"docs/{page.name}" for page in DOCS.glob("*.md")} <= linked


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.name)
def test_relative_links_lead_to_files_and_headings_that_exist(page: Path) -> None:
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name} links {target}, which does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{page.name} links {target}: no such heading"


def test_every_lace_command_shown_at_a_prompt_parses() -> None:
    commands = [command for page in pages() for command in
                re.findall(r"^\S*\$ +(lace(?: .*)?)$", page.read_text(), flags=re.MULTILINE)]
    assert len(commands) >= 10
    parser = build_parser()
    for command in commands:
        words = shlex.split(command.split(" && ")[0], comments=True)[1:]
        parser.parse_args(words)
