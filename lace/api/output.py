"""An answer in a pydantic model: the instruction that asks for it and the check of the reply,
whose validation error goes back to the model (as pydantic-ai's output retries do)."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from lace.core.errors import LaceError

ModelT = TypeVar("ModelT", bound=BaseModel)
OUTPUT_RETRIES = 2
"""How many times the root is asked again for an answer that did not validate."""


class OutputValidationError(LaceError):
    """The root's answer never validated against the `output_type` asked for."""


def output_instruction(output_type: type[BaseModel]) -> str:
    """What the prompt adds so the root answers with one JSON object of `output_type`."""
    schema = json.dumps(output_type.model_json_schema(), ensure_ascii=False)
    return ("\n\nWhen you are done, your final answer must be one JSON object, with no other "
            f"text around it, that validates against this JSON schema:\n{schema}")


def json_part(answer: str) -> str:
    """The JSON object in an answer: the text from its first `{` to its last `}` (a model may
    wrap it in a code fence); the answer as it is when it has none."""
    start, end = answer.find("{"), answer.rfind("}")
    return answer[start:end + 1] if 0 <= start < end else answer


def parse_output(output_type: type[ModelT], answer: str | None) -> ModelT:
    """The answer as an `output_type` instance; ValidationError when it is not one."""
    return output_type.model_validate_json(json_part(answer or ""))


def retry_message(error: ValidationError) -> str:
    """What the root is told when its answer did not validate: each error with its place."""
    problems = "\n".join(f"- {_place(problem)}: {problem['msg']}"
                         for problem in error.errors(include_url=False))
    return ("Your final answer did not validate against the JSON schema you were given:\n"
            f"{problems}\nAnswer again with only the corrected JSON object.")


def _place(problem: Any) -> str:
    return ".".join(str(part) for part in problem["loc"]) or "the answer"
