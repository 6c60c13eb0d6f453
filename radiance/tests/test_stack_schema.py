"""The stack file's JSON Schema: generated from the loader's models, checked in where the example
file points editors at it, and refusing what the loader refuses (validated with jsonschema, the
validator YAML language servers implement)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from radiance.stack import StackFileError, parse_stacks
from radiance.stack_schema import schema, text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "stacks.example.yaml"
SCHEMA_FILE = ROOT / "deploy" / "stacks.schema.json"
GOOD = "version: 1\nstacks:\n  x:\n    arch: cpu\n    model: m\n    quant: paroquant\n    port: 9000\n"


def _errors(doc: str) -> list[str]:
    return [e.message for e in Draft202012Validator(schema()).iter_errors(yaml.safe_load(doc))]


def test_the_checked_in_schema_is_generated_from_the_models():
    assert SCHEMA_FILE.read_text() == text(), "run: python -m radiance.stack_schema > deploy/stacks.schema.json"
    Draft202012Validator.check_schema(schema())


def test_the_example_names_the_schema_and_passes_it():
    assert EXAMPLE.read_text().splitlines()[0] == "# yaml-language-server: $schema=stacks.schema.json"
    assert _errors(EXAMPLE.read_text()) == []
    assert _errors(GOOD + "    env:\n      VLLM_CPU_KVCACHE_SPACE: 2\n      RADIANCE_PQ_SKIP: true\n") == []


@pytest.mark.parametrize("extra", [
    "    gpus: [0]\n",  # unknown key
    "    port: 70000\n".replace("    port", "    tp: 9\n    port"),
    "    runtime: podman\n    image: '--privileged x'\n",
    '    env:\n      X: "a\\nExecStartPre=/bin/touch /tmp/pwned"\n',
    "    host: 'localhost --privileged'\n",
    "    container: '-x'\n",
    "    env:\n      'not a name': 1\n",
])
def test_what_the_loader_refuses_the_schema_refuses(extra):
    doc = GOOD + extra
    with pytest.raises(StackFileError):
        parse_stacks(doc, Path("s.yaml"))
    assert _errors(doc), f"the schema accepts what the loader refuses: {extra!r}"


def test_stack_names_are_held_to_their_pattern():
    assert _errors(GOOD.replace("  x:", "  Bad Name:"))


def test_the_cli_prints_it():
    import subprocess
    import sys

    exe = Path(sys.executable).with_name("radiance")
    r = subprocess.run([str(exe), "stack-schema"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == text()
