"""Shell completion of stack names (typer's `autocompletion=`), for vllm-switch and radiance-launch.

The names come from the stack file the command would read: `--stacks` when it is already on the
command line, else the default (RADIANCE_STACKS, $RADIANCE_HOME/stacks.yaml, the bundled example).
A stack file that does not load completes nothing: completion must never print an error into the
shell.
"""

from __future__ import annotations

from pathlib import Path

import typer


def stack_names(ctx: typer.Context, incomplete: str) -> list[str]:
    from radiance.stack import StackFileError, load_stacks

    given, at = None, ctx
    while at is not None and given is None:
        given = at.params.get("stacks")
        at = at.parent
    try:
        sf = load_stacks(Path(given) if given else None)
    except (StackFileError, OSError):
        return []
    return sorted(n for n in sf.stacks if n.startswith(incomplete))
