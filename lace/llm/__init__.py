"""The one seam to LLMs: the only package that imports litellm, and only when first needed."""
