"""docs/stack-file.md documents every stack field and the radiance-launch command line; the README shows it."""

import re
from pathlib import Path

from radiance.stack import Drafter, ModeOverrides, Stack, StackFile

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "stack-file.md"


def _first_cells(section: str) -> set[str]:
    """Backticked names in the first cell of each table row."""
    names = set()
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            names |= set(re.findall(r"`([a-z_.]+)`", line.split("|")[1]))
    return names


def test_every_stack_field_is_documented():
    documented = _first_cells(DOC.read_text())
    wanted = {*StackFile.model_fields, *Stack.model_fields, *(f"drafter.{f}" for f in Drafter.model_fields),
              *ModeOverrides.model_fields}
    missing = wanted - documented
    assert not missing, f"document these stack fields in docs/stack-file.md's tables: {sorted(missing)}"


def test_command_line_is_documented():
    line = "radiance-launch STACK [--stacks FILE] [--mode eval|prod] [--dry-run]"
    assert line in DOC.read_text() and line in (ROOT / "README.md").read_text()
