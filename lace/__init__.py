"""lace: a task board for LLM agents, kept in one database (a SQLite file, or PostgreSQL)."""

__version__ = "0.1.0"
