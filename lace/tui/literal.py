"""Text from models, tools and the database as the app shows it: never parsed as markup (a `[/]`
in a task title would raise MarkupError and close the app), control characters escaped."""

from __future__ import annotations

from rich.text import Text
from textual.content import Content

from lace.core.text import printable


def literal(text: str) -> Content:
    """Content for a Static, Label or title that shows `text` exactly, line breaks kept."""
    return Content(printable(text))


def literal_line(text: str) -> Text:
    """A one-line Rich Text for a tree label or a table cell (both parse a plain str as
    markup)."""
    return Text(printable(text, one_line=True))
