"""Each layer imports without the layers above it and without the heavy libraries it does not need:
proved in a fresh interpreter by reading `sys.modules`, and by running the import-linter contracts
of pyproject.toml, which also see imports inside functions."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import lace

LACE_DIR = Path(lace.__file__).parent
REPO_ROOT = LACE_DIR.parent


def modules_of(package: str) -> list[str]:
    """The package and its modules (found on disk, not imported here)."""
    folder = LACE_DIR.joinpath(*package.split(".")[1:])
    return [package, *(f"{package}.{found.name}" for found in pkgutil.iter_modules([str(folder)]))]


def modules_after(code: str) -> set[str]:
    """Everything in `sys.modules` after a fresh interpreter runs `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def modules_after_import(*modules: str) -> set[str]:
    """Everything in `sys.modules` after a fresh interpreter imports `modules`."""
    return modules_after("".join(f"import {module}\n" for module in modules))


def loaded_from(loaded: set[str], packages: tuple[str, ...]) -> set[str]:
    """The loaded modules that are one of `packages` or inside one."""
    return {module for module in loaded
            if any(module == package or module.startswith(f"{package}.") for package in packages)}


def test_the_core_imports_nothing_but_the_core_and_the_standard_library() -> None:
    loaded = modules_after_import(*modules_of("lace.core"))
    assert "lace.core.tasks" in loaded  # the probe sees the imports at all
    assert loaded_from(loaded, ("sqlalchemy", "alembic", "litellm", "textual", "pydantic")) == set()
    assert loaded_from(loaded, ("lace.paths", "lace.config", "lace.store", "lace.llm",
                                "lace.tools", "lace.runtime", "lace.tui", "lace.cli")) == set()


def test_the_settings_import_only_the_core() -> None:
    loaded = modules_after_import("lace.config", "lace.paths")
    assert loaded_from(loaded, ("sqlalchemy", "alembic", "litellm", "textual")) == set()
    assert loaded_from(loaded, ("lace.store", "lace.llm", "lace.tools", "lace.runtime",
                                "lace.tui", "lace.cli")) == set()


def test_the_store_imports_neither_the_llm_nor_the_layers_above_it() -> None:
    loaded = modules_after_import(*modules_of("lace.store"))
    assert "sqlalchemy" in loaded
    assert loaded_from(loaded, ("litellm", "textual")) == set()
    assert loaded_from(loaded, ("lace.llm", "lace.tools", "lace.runtime", "lace.tui",
                                "lace.cli")) == set()


def test_the_llm_seam_imports_only_the_core_and_litellm_only_when_first_called() -> None:
    loaded = modules_after_import(*modules_of("lace.llm"))
    assert "lace.llm.client" in loaded
    assert loaded_from(loaded, ("litellm", "sqlalchemy", "textual")) == set()
    assert loaded_from(loaded, ("lace.paths", "lace.config", "lace.store", "lace.tools",
                                "lace.runtime", "lace.tui", "lace.cli")) == set()


def test_the_openai_client_imports_neither_litellm_nor_the_openai_sdk() -> None:
    loaded = modules_after_import("lace.llm.client", "lace.llm.openai_client", "lace.llm.prices")
    assert "lace.llm.openai_client" in loaded
    assert loaded_from(loaded, ("litellm", "openai", "httpx")) == set()


def test_the_tools_import_neither_the_llm_nor_the_runtime() -> None:
    loaded = modules_after_import(*modules_of("lace.tools"), *modules_of("lace.tools.mcp"))
    assert "lace.tools.registry" in loaded and "lace.tools.mcp.servers" in loaded
    assert loaded_from(loaded, ("litellm", "textual", "mcp", "mcp_types")) == set()
    assert loaded_from(loaded, ("lace.llm", "lace.runtime", "lace.tui", "lace.cli")) == set()


def test_the_runtime_knows_nothing_of_the_ui() -> None:
    loaded = modules_after_import(*modules_of("lace.runtime"), "lace.llm.client")
    assert "lace.runtime.scheduler" in loaded and "lace.runtime.assembly" in loaded
    assert loaded_from(loaded, ("textual", "litellm", "mcp", "mcp_types")) == set()
    assert loaded_from(loaded, ("lace.tui", "lace.cli")) == set()


def test_the_command_line_parser_imports_nothing_heavy() -> None:
    loaded = modules_after("import lace.cli\nlace.cli.build_parser()")
    assert "lace.cli.commands" in loaded
    assert loaded_from(loaded, ("sqlalchemy", "alembic", "litellm", "textual", "pydantic",
                                "mcp", "uvicorn", "starlette")) == set()


def test_commands_that_need_no_database_import_no_database_library() -> None:
    for argv in (["keys", "list"], ["config"], ["hooks"], ["completion", "bash"]):
        loaded = modules_after(f"import contextlib, io, lace.cli\n"
                               f"with contextlib.redirect_stdout(io.StringIO()):\n"
                               f"    assert lace.cli.main({argv!r}) == 0")
        assert "lace.cli.errors" in loaded, argv
        assert loaded_from(loaded, ("sqlalchemy", "alembic", "litellm", "textual")) == set(), argv


def test_the_mcp_sdk_is_imported_only_when_servers_are_used_or_served() -> None:
    loaded = modules_after_import("lace.cli.board", "lace.cli.run", "lace.cli.mcp_serve",
                                  *modules_of("lace.runtime"), *modules_of("lace.tools"))
    assert "lace.cli.mcp_serve" in loaded
    assert loaded_from(loaded, ("mcp", "uvicorn", "lace.cli.mcp_board")) == set()


def test_the_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint_imports), "--no-cache"], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_test_modules_share_helpers_through_helper_modules_only() -> None:
    import ast

    tests = Path(__file__).parent
    crossings = []
    for path in sorted(tests.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            crossings += [f"{path.name} imports {name}" for name in names
                          if name.startswith("tests.test_")]
    assert crossings == []
