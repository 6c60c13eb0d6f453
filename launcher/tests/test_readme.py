"""The README's "Stack file" section documents every stack field and every radiance-launch flag."""

import re
from pathlib import Path

from radiance.launcher.stack import Drafter, ModeOverrides, Stack, StackFile

README = Path(__file__).resolve().parents[2] / "README.md"


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def _first_cells(section: str) -> set[str]:
    """Backticked names in the first cell of each table row."""
    names = set()
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            names |= set(re.findall(r"`([a-z_.]+)`", line.split("|")[1]))
    return names


def test_every_stack_field_is_documented():
    documented = _first_cells(_section("Stack file"))
    wanted = {*StackFile.model_fields, *Stack.model_fields, *(f"drafter.{f}" for f in Drafter.model_fields),
              *ModeOverrides.model_fields}
    missing = wanted - documented
    assert not missing, f"document these stack fields in the README 'Stack file' tables: {sorted(missing)}"


def test_command_line_is_documented():
    sec = _section("Stack file")
    assert "radiance-launch STACK [--stacks FILE] [--mode eval|prod] [--dry-run]" in sec
