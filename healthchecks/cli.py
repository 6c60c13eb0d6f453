"""Commands this package adds to the `radiance` CLI."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this package's commands to the root app."""
