"""The stack-file schema: the example file loads; bad files say file, line, key and what is allowed."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from radiance.stack import StackFileError, default_stacks_path, load_stacks, parse_stacks

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "stacks.example.yaml"

GOOD = """\
version: 1
stacks:
  x:
    arch: cpu
    model: m
    quant: paroquant
    port: 9000
"""


def _err(text: str) -> str:
    with pytest.raises(StackFileError) as e:
        parse_stacks(text, Path("s.yaml"))
    return str(e.value)


def test_example_defines_the_required_stacks():
    sf = load_stacks(EXAMPLE)
    assert {"paro", "paromx", "pq2", "turing", "demo"} <= set(sf.stacks)
    paro, demo = sf.get("paro"), sf.get("demo")
    assert (paro.arch, paro.tp, paro.port, paro.quant) == ("gfx1201", 2, 8080, "paroquant")
    assert paro.drafter is not None and paro.spec > 0
    assert sf.get("paromx").quant == "paroquant_mxfp4"
    assert (sf.get("pq2").quant, sf.get("pq2").arch) == ("pq2", "sm_86")
    assert (sf.get("turing").arch, sf.get("turing").dtype) == ("sm_75", "float16")
    assert (demo.arch, demo.runtime, demo.port, demo.quant) == ("cpu", "native", 8765, "paroquant")
    assert demo.name == "demo" and paro.container_name == "qwen_vllm_paro"


def test_default_path_follows_radiance_stacks(monkeypatch, tmp_path):
    monkeypatch.setenv("RADIANCE_HOME", str(tmp_path))
    monkeypatch.delenv("RADIANCE_STACKS", raising=False)
    assert default_stacks_path().name == "stacks.example.yaml"
    (tmp_path / "stacks.yaml").write_text(GOOD)
    assert default_stacks_path() == tmp_path / "stacks.yaml"
    monkeypatch.setenv("RADIANCE_STACKS", str(tmp_path / "other.yaml"))
    assert default_stacks_path() == tmp_path / "other.yaml"


def test_env_values_become_strings_and_stacks_are_frozen():
    sf = parse_stacks(GOOD + "    env:\n      VLLM_CPU_KVCACHE_SPACE: 2\n      RADIANCE_PQ_SKIP: true\n", Path("s.yaml"))
    x = sf.get("x")
    assert x.env == {"VLLM_CPU_KVCACHE_SPACE": "2", "RADIANCE_PQ_SKIP": "1"}
    with pytest.raises(Exception):
        x.port = 1  # type: ignore[misc]


def test_unknown_stack_lists_the_known_ones():
    sf = parse_stacks(GOOD, Path("s.yaml"))
    with pytest.raises(StackFileError, match=r"no stack named 'nope'; stacks in this file: x"):
        sf.get("nope")


def test_malformed_yaml_names_the_line():
    msg = _err(GOOD + "  y: [1, 2\n  z: 3\n")
    assert msg.startswith("s.yaml:9:") and "not valid YAML" in msg


def test_unknown_key_names_line_key_and_allowed_keys():
    msg = _err(GOOD + "    gpus: [0]\n")
    assert msg.startswith("s.yaml:8: stacks.x.gpus: unknown key; allowed keys here:")
    assert "devices" in msg and "chat_template" in msg


def test_unknown_key_inside_a_mode_lists_the_mode_keys():
    msg = _err(GOOD + "    prod:\n      eager: true\n")
    assert "s.yaml:9: stacks.x.prod.eager: unknown key" in msg and "enforce_eager" in msg


def test_bad_value_lists_allowed_values():
    msg = _err(GOOD.replace("arch: cpu", "arch: sm_61"))
    assert msg.startswith("s.yaml:4: stacks.x.arch:")
    assert "'cpu', 'gfx1201', 'sm_75'" in msg and "(got 'sm_61')" in msg
    msg = _err(GOOD.replace("quant: paroquant", "quant: gptq"))
    assert "s.yaml:6: stacks.x.quant:" in msg and "'paroquant', 'pq2'" in msg


def test_unregistered_radiance_knob_is_refused_at_its_line():
    msg = _err(GOOD + "    env:\n      RADIANCE_TURBO: 1\n")
    assert msg.startswith("s.yaml:9: stacks.x.env.RADIANCE_TURBO: RADIANCE_TURBO is not a radiance knob")


def test_duplicate_stack_name_is_an_error():
    msg = _err(GOOD + "  x:\n    arch: cpu\n")
    assert msg.startswith("s.yaml:8: stacks.x: duplicate key (first at line 3)")


def test_cross_field_rules():
    assert "needs `image`" in _err(GOOD + "    runtime: podman\n")
    assert "needs `devices`" in _err(GOOD.replace("arch: cpu", "arch: sm_86"))
    assert "needs a `drafter`" in _err(GOOD + "    spec: 4\n")
    assert "tp=2 needs at least 2 devices" in _err(GOOD.replace("arch: cpu", "arch: sm_86") + "    devices: [0]\n    tp: 2\n")


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(StackFileError, match="cannot read the stack file"):
        load_stacks(tmp_path / "none.yaml")
    (tmp_path / "e.yaml").write_text("")
    with pytest.raises(StackFileError, match="the file is empty"):
        load_stacks(tmp_path / "e.yaml")


@pytest.mark.parametrize("extra, where", [
    ('    env:\n      X: "a\\nExecStartPre=/bin/touch /tmp/pwned"\n', "s.yaml:9: stacks.x.env.X"),
    ('    chat_template: "t.jinja\\nExecStartPre=/bin/touch /tmp/pwned"\n', "s.yaml:8: stacks.x.chat_template"),
    ('    description: "tab\\there"\n', "s.yaml:8: stacks.x.description"),
    ('    extra_args: ["--x", "a\\rb"]\n', "s.yaml:8: stacks.x.extra_args.1"),
    ('    api_key_file: "k\\x00"\n', "s.yaml:8: stacks.x.api_key_file"),
    ('    prod:\n      env:\n        Y: "\\u2028"\n', "s.yaml:10: stacks.x.prod.env.Y"),
])
def test_a_control_character_in_any_string_is_refused_at_its_line(extra, where):
    msg = _err(GOOD + extra)
    assert msg.startswith(where) and "contains a control character" in msg, msg


@pytest.mark.parametrize("field, value, why", [
    ("image", "'--privileged x'", "is not an image reference"),
    ("image", "'localhost/x:latest --privileged'", "is not an image reference"),
    ("container", "'-x'", "is not a podman container name"),
    ("container", "'a b'", "is not a podman container name"),
    ("host", "'127.0.0.1 --privileged'", "is not an IP address"),
    ("host", "localhost", "is not an IP address"),
    ("served_name", "'two words'", "is no served model name"),
    ("served_name", '"demo\\nExecStartPre=/bin/touch /tmp/pwned"', "is no served model name"),
])
def test_names_images_and_hosts_are_held_to_their_pattern(field, value, why):
    base = GOOD + ("    runtime: podman\n" if field in ("image", "container") else "")
    if field == "container":
        base += "    image: localhost/radiance-cpu:latest\n"
    msg = _err(base + f"    {field}: {value}\n")
    assert f"stacks.x.{field}: " in msg and why in msg, msg


def test_valid_names_images_and_hosts_load():
    sf = parse_stacks(GOOD + "    runtime: podman\n    image: docker.io/vllm/vllm-openai-rocm:v0.31.0\n"
                      "    container: qwen_vllm.paro-1\n    host: '::'\n    served_name: Qwen/Qwen3.8-27B@int4+r\n",
                      Path("s.yaml"))
    x = sf.get("x")
    assert (x.image, x.container, x.host, x.served_name) == (
        "docker.io/vllm/vllm-openai-rocm:v0.31.0", "qwen_vllm.paro-1", "::", "Qwen/Qwen3.8-27B@int4+r")


def test_a_podman_stacks_mounted_paths_hold_no_colon_or_comma():
    msg = _err(GOOD + "    runtime: podman\n    image: localhost/x:1\n    cache_dir: 'a:b'\n")
    assert "cache_dir 'a:b': a podman stack's paths are bind mounts" in msg


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path):
    """~500 bytes of nested aliases expand to 9^9 nodes: the real CLI refuses the file in a second
    instead of walking it for hours."""
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi"):
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    bomb = "version: 1\n" + "\n".join(levels) + "\nstacks: {x: {arch: cpu, model: m, quant: paroquant, port: 1, env: {A: *i}}}\n"
    assert len(bomb) < 600
    f = tmp_path / "bomb.yaml"
    f.write_text(bomb)
    exe = Path(sys.executable).with_name("radiance")
    t = time.monotonic()
    r = subprocess.run([str(exe), "render", "--stacks", str(f), "--out", str(tmp_path / "units")], capture_output=True,
                       text=True, timeout=60)
    assert time.monotonic() - t < 30
    assert r.returncode == 2 and "expands to more than 50000 YAML nodes" in r.stderr, r.stderr
    assert not (tmp_path / "units").exists()


def test_shared_anchors_still_load():
    text = ("version: 1\nstacks:\n  x:\n    arch: cpu\n    model: m\n    quant: paroquant\n    port: 1\n"
            "    env: &shared {VLLM_CPU_KVCACHE_SPACE: 2}\n  y:\n    arch: cpu\n    model: m\n    quant: paroquant\n"
            "    port: 2\n    env: *shared\n")
    assert parse_stacks(text, Path("s.yaml")).get("y").env == {"VLLM_CPU_KVCACHE_SPACE": "2"}
