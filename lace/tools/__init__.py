"""Tools the LLM calls: one pydantic model each, a registry that builds schemas and runs them."""
