"""No class of lace grows past 40 methods, its inherited ones counted: a class that wide is
mixins stacked where small objects should be composed. Read from the source with `ast`;
methods inherited from outside lace (Textual's `App`) are not counted."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import lace

MAX_METHODS = 40
LACE_DIR = Path(lace.__file__).parent


@dataclass(frozen=True)
class ClassInfo:
    """One class definition: its own methods, and its bases as (module, name) to look up."""

    module: str
    name: str
    methods: frozenset[str]
    bases: tuple[tuple[str | None, str], ...]


def _module_name(root: Path, path: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """Names a module imports with `from x import Name`, to the module they come from."""
    return {alias.asname or alias.name: node.module for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names}


def read_classes(root: Path) -> dict[tuple[str, str], ClassInfo]:
    """Every class defined under the package folder `root`, by (module, name)."""
    classes: dict[tuple[str, str], ClassInfo] = {}
    for path in sorted(root.rglob("*.py")):
        module = _module_name(root, path)
        tree = ast.parse(path.read_text(), filename=str(path))
        imported = _imported_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            methods = frozenset(item.name for item in node.body
                                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef))
            bases = []
            for base in node.bases:
                if isinstance(base, ast.Name):
                    bases.append((imported.get(base.id, module), base.id))
                elif isinstance(base, ast.Attribute):
                    bases.append((None, base.attr))
            classes[module, node.name] = ClassInfo(module, node.name, methods, tuple(bases))
    return classes


def _find(classes: dict[tuple[str, str], ClassInfo], module: str | None,
          name: str) -> ClassInfo | None:
    """The class a base names: in the module it comes from, else the one class of that name."""
    if module is not None and (module, name) in classes:
        return classes[module, name]
    found = [info for (_, class_name), info in classes.items() if class_name == name]
    return found[0] if len(found) == 1 else None


def all_methods(classes: dict[tuple[str, str], ClassInfo], info: ClassInfo,
                seen: frozenset[tuple[str, str]] = frozenset()) -> set[str]:
    """A class's methods with those it inherits from classes of the same package."""
    methods = set(info.methods)
    for module, name in info.bases:
        base = _find(classes, module, name)
        if base is not None and (base.module, base.name) not in seen:
            methods |= all_methods(classes, base, seen | {(info.module, info.name)})
    return methods


def too_wide(root: Path, limit: int = MAX_METHODS) -> dict[str, int]:
    """`module.Class` -> its method count, for each class of `root` past `limit`."""
    classes = read_classes(root)
    widths = {f"{info.module}.{info.name}": len(all_methods(classes, info))
              for info in classes.values()}
    return {name: width for name, width in widths.items() if width > limit}


def test_no_class_of_lace_has_more_than_40_methods() -> None:
    wide = too_wide(LACE_DIR)
    assert not wide, (f"classes past {MAX_METHODS} methods (inherited ones counted): {wide}; "
                      "compose small objects instead of adding verbs or mixins")


def _write(folder: Path, name: str, source: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(source)


def _methods(prefix: str, count: int) -> str:
    return "".join(f"    def {prefix}_{n}(self) -> None: ...\n" for n in range(count))


def test_a_stack_of_mixins_is_counted_whole(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    _write(package, "__init__.py", "")
    _write(package, "rows.py", f"class Rows:\n{_methods('row', 15)}")
    _write(package, "rules.py", "from pkg.rows import Rows\n\n\n"
                                f"class Rules(Rows):\n{_methods('rule', 15)}")
    _write(package / "sub", "__init__.py", "")
    _write(package / "sub", "tx.py", "from textual.app import App\n\nfrom pkg import rules\n\n\n"
                                     f"class Tx(rules.Rules, App):\n{_methods('verb', 11)}\n\n"
                                     f"class Small(App):\n{_methods('verb', 3)}")
    assert too_wide(package) == {"pkg.sub.tx.Tx": 41}
    assert too_wide(package, limit=41) == {}
