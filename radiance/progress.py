"""Progress bars and spinners for long work (downloads, conversion, quantization, evaluation),
drawn on stderr: stdout carries the commands' results -- `radiance fetch-model` prints the
checkpoint path that scripts/demo captures, and a bar on stdout put a stray newline before it."""

from __future__ import annotations

from rich.console import Console
from rich.progress import Progress, ProgressColumn
from rich.status import Status


def bar(*columns: ProgressColumn | str, enabled: bool = True) -> Progress:
    """A transient rich progress bar on stderr (nothing drawn when not enabled)."""
    return Progress(*columns, console=Console(stderr=True), disable=not enabled, transient=True)


def status(message: str) -> Status:
    """A spinner with a message on stderr, for work without a measurable total."""
    return Console(stderr=True).status(message)
