"""Shell completion of the CLIs, through real bash and the scripts typer installs: stack names
complete for `vllm-switch` and `radiance-launch`, from the stack file the command would read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from radiance.testing.tools import require_tool

BIN = Path(sys.executable).parent
EXAMPLE = Path(__file__).resolve().parents[1] / "stacks.example.yaml"
OTHER = "version: 1\nstacks:\n  alpha:\n    arch: cpu\n    model: m\n    quant: none\n    port: 1\n"


def _complete(prog: str, *words: str, stacks: Path = EXAMPLE) -> list[str]:
    """COMPREPLY after bash runs the completion function `prog --show-completion bash` installs."""
    require_tool("bash")
    fn = "_" + prog.replace("-", "_") + "_completion"
    line = " ".join(f"'{w}'" for w in (prog, *words))
    script = (f'source <("{BIN / prog}" --show-completion bash) && COMP_WORDS=({line}) && '
              f'COMP_CWORD={len(words)} && {fn} "{BIN / prog}" && printf "%s\\n" "${{COMPREPLY[@]}}"')
    env = {**os.environ, "RADIANCE_STACKS": str(stacks), "PATH": f"{BIN}:{os.environ['PATH']}"}
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return [w for w in r.stdout.splitlines() if w]


def test_vllm_switch_completes_stack_names_and_subcommands():
    assert _complete("vllm-switch", "p") == ["paro", "paromx", "pq2"]
    first = _complete("vllm-switch", "")
    assert {"status", "list", "stop", "demo", "turing"} <= set(first) and "to" not in first  # `to` is hidden
    assert _complete("vllm-switch", "stop", "t") == ["turing"]


def test_the_stacks_on_the_command_line_are_the_ones_completed(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(OTHER)
    assert _complete("vllm-switch", "stop", "--stacks", str(other), "") == ["alpha"]
    assert _complete("radiance-launch", "--stacks", str(other), "") == ["alpha"]


@pytest.mark.parametrize("prog", ["radiance-launch", "radiance"])
def test_every_cli_installs_completion(prog):
    if prog == "radiance-launch":
        assert _complete(prog, "tu") == ["turing"]
    else:
        assert {"setup", "render", "probe", "exporter"} <= set(_complete(prog, ""))


def test_a_broken_stack_file_completes_nothing_and_prints_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("stacks: [")
    assert _complete("vllm-switch", "stop", "", stacks=bad) == []
