"""pytest fixtures shared across packages (loaded by the root conftest.py)."""
