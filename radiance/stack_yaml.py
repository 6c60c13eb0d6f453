"""Reading the stack file's YAML: the data, and the line of every key for error messages.

Only YAML's safe subset is read. Anchors and aliases are allowed (a shared `env:` block), but their
expansion is bounded: a few hundred bytes of nested aliases (a "billion laughs" file) expand to
billions of nodes, which the line walk and the schema would each visit. A file whose expansion
exceeds MAX_NODES is refused before anything walks it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# A stack file of a hundred stacks is a few thousand nodes; this leaves room for aliases and stops
# an exponential expansion within milliseconds.
MAX_NODES = 50_000


class StackFileError(ValueError):
    """A stack file that cannot be used; str() is the message for the person editing it."""


def line_for(lines: dict[tuple, int], loc: tuple) -> int:
    """The line of the deepest key of `loc` the file has (1 when none)."""
    for n in range(len(loc), -1, -1):
        if tuple(loc[:n]) in lines:
            return lines[tuple(loc[:n])]
    return 1


class _Walk:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: dict[tuple, int] = {}
        self.nodes = 0

    def __call__(self, node: yaml.Node, loc: tuple) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise StackFileError(f"{self.path}: the file expands to more than {MAX_NODES} YAML nodes (nested "
                                 f"anchors and aliases multiply); a stack file needs far fewer: write the values "
                                 f"out or use fewer nested aliases")
        self.lines.setdefault(loc, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for k, v in node.value:
                key = k.value
                line = k.start_mark.line + 1
                if key in seen:
                    raise StackFileError(f"{self.path}:{line}: {'.'.join(map(str, loc + (key,)))}: "
                                         f"duplicate key (first at line {seen[key]})")
                seen[key] = line
                self.lines[loc + (key,)] = line
                self(v, loc + (key,))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.lines[loc + (i,)] = item.start_mark.line + 1
                self(item, loc + (i,))


def read_yaml(text: str, path: Path) -> tuple[Any, dict[tuple, int]]:
    """(data, {key path: line}); StackFileError for invalid YAML, an empty file or an alias bomb."""
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            walk = _Walk(path)
            if node is not None:
                walk(node, ())  # before constructing: the walk is what bounds the expansion
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise StackFileError(f"{where}: not valid YAML: {e.problem or e}") from None
    if data is None:
        raise StackFileError(f"{path}: the file is empty; it needs a `stacks:` map (see deploy/stacks.example.yaml)")
    if not isinstance(data, dict):
        raise StackFileError(f"{path}:1: the top level must be a map with `stacks:` (see deploy/stacks.example.yaml)")
    return data, walk.lines
