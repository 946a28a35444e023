"""Values and rules of the task board, with no I/O and no heavy imports."""
