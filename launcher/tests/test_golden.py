"""Golden dry-runs: for every example stack x mode, `radiance-launch STACK --mode M --dry-run`
prints exactly the file launcher/tests/golden/<stack>-<mode>.txt.

Each golden file states its own expectations first, quadlet-test style, in `## ` lines checked
against the parsed argv/env independently of the snapshot below them:
    ## assert-arg --flag [value]     ## assert-no-arg --flag
    ## assert-env NAME=value         ## assert-no-env NAME
    ## assert-template ORIGIN        (how the chat template was chosen: stack, env, model, or none)
so regenerating the snapshot (UPDATE_GOLDEN=1) cannot quietly accept a wrong command.
Machine-specific strings are rendered as $RADIANCE_HOME, $REPO, $PYTHON, {versions}, {kernel_key}.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from radiance.launcher.argv import vllm_argv, vllm_env
from radiance.launcher.cache_key import detect_versions
from radiance.launcher.cli import app
from radiance.launcher.plan import resolve_plan
from radiance.stack import load_stacks

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "stacks.example.yaml"
GOLDEN = Path(__file__).parent / "golden"
STACKS = sorted(load_stacks(EXAMPLE).stacks)
CASES = [(s, m) for s in STACKS for m in ("eval", "prod")]


def normalize(text: str, home: Path) -> str:
    text = text.replace(sys.executable, "$PYTHON").replace(str(home), "$RADIANCE_HOME")
    text = text.replace(str(ROOT), "$REPO").replace(detect_versions().tag(), "{versions}")
    return re.sub(r"\b((?:gfx|sm_)[0-9a-z]+)-[0-9a-f]{16}\b", r"\1-{kernel_key}", text)


def split_golden(text: str) -> tuple[list[str], str]:
    lines = text.splitlines(keepends=True)
    asserts = [ln[3:].strip() for ln in lines if ln.startswith("## ")]
    return asserts, "".join(ln for ln in lines if not ln.startswith("## "))


def check_assertion(rule: str, argv: list[str], env: dict[str, str], template: str = "none") -> str | None:
    verb, _, rest = rule.partition(" ")
    if verb == "assert-template":
        if template != rest:
            return f"chat template chosen by {template!r}, expected {rest!r}"
    elif verb == "assert-arg":
        flag, _, value = rest.partition(" ")
        if flag not in argv:
            return f"{flag} missing"
        if value and argv[argv.index(flag) + 1] != value:
            return f"{flag} is {argv[argv.index(flag) + 1]!r}, expected {value!r}"
    elif verb == "assert-no-arg":
        if rest in argv:
            return f"{rest} present"
    elif verb == "assert-env":
        k, _, v = rest.partition("=")
        if env.get(k) != v:
            return f"{k}={env.get(k)!r}, expected {v!r}"
    elif verb == "assert-no-env":
        if rest in env:
            return f"{rest} is set ({env[rest]!r})"
    else:
        return f"unknown assertion {verb!r}"
    return None


@pytest.mark.parametrize("stack,mode", CASES, ids=[f"{s}-{m}" for s, m in CASES])
def test_dry_run_matches_golden(launch_home, stack, mode):
    res = CliRunner().invoke(app, [stack, "--stacks", str(EXAMPLE), "--mode", mode, "--dry-run"])
    assert res.exit_code == 0, res.output
    got = normalize(res.stdout, launch_home)
    path = GOLDEN / f"{stack}-{mode}.txt"
    asserts, expected = split_golden(path.read_text()) if path.exists() else ([], "")
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text("".join(f"## {a}\n" for a in asserts) + got)
        expected = got
    assert asserts, f"{path.name} states no expectations (## assert-... lines)"
    assert got == expected, f"dry-run differs from {path} (UPDATE_GOLDEN=1 rewrites the snapshot)"

    plan = resolve_plan(load_stacks(EXAMPLE), stack, mode, os.environ)
    argv = [normalize(a, launch_home) for a in vllm_argv(plan)]
    env = {k: normalize(v, launch_home) for k, v in vllm_env(plan).items()}
    origin = (plan.template.origin or "unset") if plan.template else "none"
    failures = [f"{a}: {why}" for a in asserts if (why := check_assertion(a, argv, env, origin))]
    assert not failures, f"{path.name}: " + "; ".join(failures)


def test_every_golden_file_has_a_case():
    names = {p.name for p in GOLDEN.glob("*.txt")}
    assert names == {f"{s}-{m}.txt" for s, m in CASES}


def test_assertions_can_fail():
    argv, env = ["x", "--port", "1", "--enforce-eager"], {"A": "1"}
    assert check_assertion("assert-arg --port 1", argv, env) is None
    assert check_assertion("assert-arg --port 2", argv, env) == "--port is '1', expected '2'"
    assert check_assertion("assert-no-arg --enforce-eager", argv, env) == "--enforce-eager present"
    assert check_assertion("assert-arg --dtype", argv, env) == "--dtype missing"
    assert check_assertion("assert-env A=2", argv, env) == "A='1', expected '2'"
    assert check_assertion("assert-no-env A", argv, env) == "A is set ('1')"
    assert check_assertion("assert-typo x", argv, env) == "unknown assertion 'assert-typo'"
    assert check_assertion("assert-template model", argv, env, "model") is None
    assert check_assertion("assert-template model", argv, env) == "chat template chosen by 'none', expected 'model'"
