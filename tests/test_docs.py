"""The README stays a front door: short, linking every page of docs/, with links that lead
somewhere, commands at a prompt that the parser accepts, and a tour that prints what it shows."""

from __future__ import annotations

import re
import shlex
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from lace.cli import build_parser
from tests.conftest import run_cli

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


SESSION_ID = re.compile(r"lace_\d{8}_[0-9a-z]{6}")
VARYING = [(SESSION_ID, "lace_SESSION"), (re.compile(r"task_\d{8}_[0-9a-f]{6}"), "task_ID"),
           (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?Z?)?"), "WHEN"),
           (re.compile(r"^\d\d:\d\d:\d\d", flags=re.MULTILINE), "TIME")]
"""What differs from one run of the tour to the next: ids, dates and times (all of one length
each, so columns line up alike on both sides)."""


def normal(text: str) -> str:
    for pattern, placeholder in VARYING:
        text = pattern.sub(placeholder, text)
    return text


TOURS = [(README, "## A five-minute tour", "### From Python"),
         (DOCS / "cli.md", "## The board by hand", "## Approvals")]
"""The parts of pages whose console blocks run on the demo model, in this order, on one board."""


def tour_blocks() -> list[list[str]]:
    """The console blocks of the tours, each as its lines."""
    blocks = []
    for page, start, stop in TOURS:
        text = page.read_text()
        tour = text[text.index(start):text.index(stop)]
        blocks += [block.splitlines()
                   for block in re.findall(r"```console\n(.*?)```", tour, re.DOTALL)]
    return blocks


def shown_and_printed(shown: list[str], printed: list[str]) -> tuple[Counter[str], Counter[str]]:
    """The page's lines and the printed ones, normalized and counted (helpers run at once, so
    their lines come in any order). Where the page elides lines (`...`), only the lines it
    shows are looked for among those printed, and a line it cuts short (ending in `…`) stands
    for the printed line it starts."""
    expected = Counter(normal(line) for line in shown if line != "...")
    got = Counter(normal(line) for line in printed)
    if "..." in shown:
        cut = [line for line in expected if line.endswith("…")]
        got = Counter(next((start for start in cut if line.startswith(start[:-1])), line)
                      for line in got.elements())
        got = Counter({line: count for line, count in got.items() if line in expected})
    return expected, got


def sqlite_session(lines: list[str], db: Path, session: str) -> list[tuple[list[str], list[str]]]:
    """The `sqlite>` queries of a block (`...>` continues one), asked of `session`, each with
    the page's rows and the rows sqlite3 gives, printed as the sqlite3 shell prints them."""
    steps: list[tuple[str, list[str]]] = []
    for line in lines[1:]:
        if line.startswith("sqlite> "):
            steps.append((line.removeprefix("sqlite> "), []))
        elif line.startswith("   ...> "):
            steps[-1] = (steps[-1][0] + " " + line.removeprefix("   ...> "), steps[-1][1])
        else:
            steps[-1][1].append(line)
    with sqlite3.connect(db) as connection:
        return [(rows, ["|".join("" if value is None else str(value) for value in row)
                        for row in connection.execute(SESSION_ID.sub(session, sql))])
                for sql, rows in steps]


def test_the_tours_print_what_their_pages_show(capsys: pytest.CaptureFixture[str],
                                               isolated_home: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # where the tour's export writes its file
    session = ""
    blocks = tour_blocks()
    assert len(blocks) >= 5
    for block in blocks:
        if block[0].startswith("$ sqlite3 "):
            for shown, printed in sqlite_session(block, isolated_home / "lace.db", session):
                expected, got = shown_and_printed(shown, printed)
                assert expected == got, shown
            continue
        commands = [index for index, line in enumerate(block) if line.startswith("$ ")]
        for start, end in zip(commands, [*commands[1:], len(block)], strict=True):
            command = block[start].removeprefix("$ ")
            if command.startswith("export "):
                continue
            printed = ""
            for one in (SESSION_ID.sub(session, command) if session else command).split(" && "):
                words = shlex.split(one)
                assert words[0] == "lace", command
                code, out, err = run_cli(capsys, *words[1:])
                assert code == 0, err
                printed += err + out
            session = session or SESSION_ID.findall(printed)[0]
            expected, got = shown_and_printed(block[start + 1:end], printed.splitlines())
            assert expected == got, command


def test_every_page_lace_points_a_person_to_exists() -> None:
    sources = [path.read_text() for path in (ROOT / "lace").rglob("*.py")]
    named = {page for source in sources for page in re.findall(r"docs/[\w.-]+\.md", source)}
    assert len(named) >= 3
    assert {page for page in named if not (ROOT / page).exists()} == set()
    assert not [source for source in sources if "see the README" in source]  # the README
    # is a front door: what a message points to lives in docs/


def test_the_readme_puts_lace_on_the_path_before_its_first_lace_command() -> None:
    """`make demo` installs lace in .venv, which is not on a new shell's PATH: the README says
    how to reach it before the tour types `lace`."""
    text = README.read_text()
    first_command = re.search(r"^\$ lace ", text, flags=re.MULTILINE)
    assert first_command is not None
    assert "source .venv/bin/activate" in " ".join(text[:first_command.start()].split())
    assert "source $(BIN)/activate" in (ROOT / "Makefile").read_text()  # make demo says so too
