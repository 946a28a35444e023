"""A settings file's validation problem in words a person can act on: a mistyped key names the
settings it may have meant, as a mistyped command does."""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from lace.core.nearest import did_you_mean, nearest
from lace.core.shown import shown_briefly

SETTING_NAME_CHARACTERS = 120
"""Of a setting's name in a message: a key of a repository's lace.toml may be a megabyte long,
and the message must still name the file and the problem after it."""


def setting_name(problem: Any) -> str:
    """The dotted name of the setting of one pydantic error (`limits.max_running`), cut when
    it is long."""
    return shown_briefly(".".join(str(part) for part in problem["loc"]), SETTING_NAME_CHARACTERS)


def problem_text(settings: type[BaseModel], problem: Any) -> str:
    """What is wrong with the setting of one pydantic error (`error.errors()` item): its
    message, or for an unknown key the nearest keys at the same place."""
    if problem["type"] != "extra_forbidden":
        return str(problem["msg"])
    *table, key = (str(part) for part in problem["loc"])
    hint = did_you_mean(nearest(key, keys_at(settings, tuple(table))))
    return (f"unknown setting; {hint}" if hint
            else "unknown setting (docs/configuration.md lists every one)")


def keys_at(settings: type[BaseModel], table: tuple[str, ...]) -> list[str]:
    """The keys a settings table may hold (`()`: the top level; `("profiles", "critic")`: a
    profile's); none where the table holds free names (`[tools.policy]`)."""
    annotation: Any = settings
    for part in table:
        model = _model_in(annotation)
        if model is not None:
            field = model.model_fields.get(part)
            annotation = field.annotation if field is not None else None
        elif get_origin(annotation) is dict:  # a table of named entries: the entry's kind
            annotation = get_args(annotation)[1]
        else:
            annotation = None
        if annotation is None:
            return []
    model = _model_in(annotation)
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The settings table an annotation is (`Limits`, `Limits | None`), if it is one."""
    if get_origin(annotation) in (Union, types.UnionType):
        found = [_model_in(part) for part in get_args(annotation)]
        return next((model for model in found if model is not None), None)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None
