"""lace: a task board for LLM agents, kept in one SQLite file."""

__version__ = "0.1.0"
