"""What lace imports is what it declares: every outside package a module of lace imports is a
dependency in pyproject.toml (or of the extra that needs it) with a compatible-release range
(`~=`), constraints.txt pins each within its range, and no private module of `mcp` is used."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = {"psycopg": "postgres", "opentelemetry": "otel"}
"""Imported only when the extra is installed (`--db postgresql://`, an OTLP endpoint set)."""


def project() -> dict[str, object]:
    data: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return data


def imported_modules() -> dict[str, set[str]]:
    """Every module path lace imports (absolute), with the files importing it."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "lace").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                node.module else []
            for name in names:
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def outside_packages() -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for module, files in imported_modules().items():
        top = module.split(".")[0]
        if top not in sys.stdlib_module_names and top not in ("lace", "__future__"):
            packages.setdefault(top, set()).update(files)
    return packages


def requirements(group: list[str]) -> dict[str, Requirement]:
    return {canonicalize_name(Requirement(text).name): Requirement(text) for text in group}


def test_every_package_lace_imports_is_declared_with_a_compatible_range() -> None:
    declared = requirements(project()["dependencies"])  # type: ignore[arg-type]
    extras = {name: requirements(group) for name, group in
              project()["optional-dependencies"].items()}  # type: ignore[attr-defined]
    distributions = packages_distributions()
    for top, files in outside_packages().items():
        names = {canonicalize_name(name) for name in distributions.get(top, [top])}
        group = extras[EXTRAS[top]] if top in EXTRAS else declared
        assert names & set(group), f"{top} (imported by {sorted(files)}) is not declared"
    for requirement in [*declared.values(), *extras["postgres"].values()]:
        operators = {spec.operator for spec in requirement.specifier}
        assert operators == {"~="}, f"{requirement}: use a compatible-release range (~=)"


def test_constraints_pin_every_dependency_within_its_range() -> None:
    pins = {canonicalize_name(line.split("==")[0]): line.split("==")[1].strip()
            for line in (ROOT / "constraints.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")}
    every = [*project()["dependencies"],  # type: ignore[misc]
             *(text for group in project()["optional-dependencies"].values()  # type: ignore[attr-defined]
               for text in group)]
    for text in every:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) == "lace":
            continue
        pinned = pins.get(canonicalize_name(requirement.name))
        assert pinned is not None, f"{requirement.name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pinned), f"{requirement.name}=={pinned} vs {text}"


def test_no_private_module_of_mcp_is_imported() -> None:
    private = {module: files for module, files in imported_modules().items()
               if module.split(".")[0] == "mcp"
               and any(part.startswith("_") for part in module.split(".")[1:])}
    assert private == {}
