"""Resolving stack + mode + environment into a LaunchPlan; the bad inputs it refuses, with their messages."""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from radiance.launcher.argv import vllm_argv, vllm_env
from radiance.launcher.cache_key import Versions
from radiance.launcher.cli import app
from radiance.launcher.plan import MODE_DEFAULTS, PlanError, resolve_plan
from radiance.stack import StackFileError, load_stacks, parse_stacks
from radiance.launcher.template import TemplateError
from radiance.testing.shape_only import layer_shapes, write_headers

from .conftest import BUNDLED_TEMPLATE

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "stacks.example.yaml"
V = Versions("0.32.0", "2.13.0+cpu", "3.9.0", "0.1.0")

SMALL = """\
version: 1
stacks:
  s:
    arch: cpu
    model: m
    quant: paroquant
    port: 9000
    drafter: {method: ngram, options: {prompt_lookup_max: 4}}
    spec: 3
    check_shapes: ["1152:896"]
    chat_template: model
"""


def _file(home: Path, text: str, name: str = "stacks.yaml") -> Path:
    p = home / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def _model(home: Path, rel: str = "m", quant: str | None = "paroquant") -> Path:
    d = home / "models" / rel
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"model_type": "qwen2"}
    if quant:
        cfg["quantization_config"] = {"quant_method": quant}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "chat_template.jinja").write_text(BUNDLED_TEMPLATE)
    # the small Qwen's widths: its merged qkv_proj is the 1152:896 that SMALL gates
    write_headers(d / "model.safetensors", layer_shapes(quant or "none", 896, 896, 128, 4864))
    return d


def _plan(home: Path, text: str = SMALL, mode: str = "eval", env: dict | None = None, name: str = "s"):
    sf = load_stacks(_file(home, text))
    return resolve_plan(sf, name, mode, {**os.environ, **(env or {})}, V)


def test_mode_defaults_live_in_one_table():
    assert MODE_DEFAULTS["eval"]["enforce_eager"] and not MODE_DEFAULTS["prod"]["enforce_eager"]
    assert MODE_DEFAULTS["eval"]["spec"] == 0 and MODE_DEFAULTS["eval"]["max_model_len"] == 32768


def test_eval_and_prod(launch_home):
    _model(launch_home)
    ev = _plan(launch_home)
    assert (ev.enforce_eager, ev.max_model_len, ev.prefix_caching, ev.spec) == (True, 32768, False, 0)
    assert ev.env_map["RADIANCE_PQ_CHECKALL"] == "1152:896"
    pr = _plan(launch_home, mode="prod")
    assert (pr.enforce_eager, pr.max_model_len, pr.prefix_caching, pr.spec) == (False, None, True, 3)
    assert "RADIANCE_PQ_CHECKALL" not in pr.env_map
    spec = json.loads(vllm_argv(pr)[vllm_argv(pr).index("--speculative-config") + 1])
    assert spec == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


def test_stack_mode_override_beats_default_and_env_beats_both(launch_home):
    _model(launch_home)
    text = SMALL + "    prod:\n      enforce_eager: true\n      spec: 2\n      env: {RADIANCE_DISABLED_KERNELS: pq2.gluon}\n"
    p = _plan(launch_home, text, "prod")
    assert p.enforce_eager and p.spec == 2 and p.env_map["RADIANCE_DISABLED_KERNELS"] == "pq2.gluon"
    p = _plan(launch_home, text, "prod", {"RADIANCE_SPEC": "0", "RADIANCE_DISABLED_KERNELS": "pq2.dp4a"})
    assert p.spec == 0 and "--speculative-config" not in vllm_argv(p)
    assert p.env_map["RADIANCE_DISABLED_KERNELS"] == "pq2.dp4a"
    assert "RADIANCE_SPEC" not in vllm_env(p)  # launcher-only knobs are not handed to vLLM


def test_bad_radiance_spec(launch_home):
    _model(launch_home)
    with pytest.raises(PlanError, match=r"RADIANCE_SPEC='x' is not a whole number"):
        _plan(launch_home, env={"RADIANCE_SPEC": "x"})
    with pytest.raises(PlanError, match=r"RADIANCE_SPEC=3 but stack 'x' has no `drafter`"):
        _plan(launch_home, "stacks:\n  x:\n    arch: cpu\n    model: m\n    quant: paroquant\n    port: 1\n",
              env={"RADIANCE_SPEC": "3"}, name="x")


def test_checkall_needs_eager(launch_home):
    _model(launch_home)
    with pytest.raises(PlanError, match="RADIANCE_PQ_CHECKALL is set but stack 's' runs compiled graphs in prod"):
        _plan(launch_home, mode="prod", env={"RADIANCE_PQ_CHECKALL": "1:1"})


GPU_SPEC = """\
stacks:
  g:
    arch: {arch}
    model: m
    quant: paroquant
    port: 9000
    drafter: {{method: ngram}}
    spec: 7
    chat_template: model
{devices}{seqs}"""


def test_verify_batches_must_fit_the_decode_band(launch_home):
    _model(launch_home)
    def plan(arch, seqs, env=None):
        devices = "" if arch == "cpu" else "    devices: [0]\n"
        return _plan(launch_home, GPU_SPEC.format(arch=arch, seqs=seqs, devices=devices), "prod", env, name="g")

    assert plan("sm_86", "    max_num_seqs: 8\n").max_num_seqs == 8  # 8 x (7 + 1) = 64 rows: the default top
    with pytest.raises(StackFileError, match=r"stacks.g.max_num_seqs: prod mode: max_num_seqs=16 x \(spec=7 \+ 1\) = 128 "
                                             r"rows .* above RADIANCE_PQ_DECODE_MAX_M=64.* lower max_num_seqs to 8"):
        plan("sm_86", "    max_num_seqs: 16\n")
    assert plan("sm_86", "    max_num_seqs: 16\n", {"RADIANCE_PQ_DECODE_MAX_M": "128"}).spec == 7
    with pytest.raises(StackFileError, match=r"RADIANCE_PQ_DECODE_MAX_M=128, but the gfx1201 decode kernel takes at most 64"):
        plan("gfx1201", "    max_num_seqs: 8\n", {"RADIANCE_PQ_DECODE_MAX_M": "128"})
    with pytest.raises(StackFileError, match=r"spec=7 needs `max_num_seqs`: vLLM's default of 256"):
        plan("sm_86", "")
    assert plan("sm_86", "", {"RADIANCE_SPEC": "0"}).spec == 0  # no verify batches: nothing to fit
    assert plan("cpu", "").spec == 7  # CPU: one path, no band


def test_check_shapes_name_full_model_linears_at_any_tp(launch_home):
    _model(launch_home)
    assert _plan(launch_home).env_map["RADIANCE_PQ_CHECKALL"] == "1152:896"  # qkv_proj, merged
    tp2 = SMALL.replace('check_shapes: ["1152:896"]', 'check_shapes: ["896:4864", "9728:896"]\n    tp: 2')
    assert _plan(launch_home, tp2).tp == 2  # down_proj and gate_up_proj as the model has them, not a rank's slice
    with pytest.raises(StackFileError, match=r"stacks.s.check_shapes: 576:896 match no paroquant linear of .* "
                                             r"\(full-model N:K.*1152:896"):
        _plan(launch_home, SMALL.replace("1152:896", "576:896"))
    with pytest.raises(PlanError, match=r"RADIANCE_PQ_CHECKALL: 5:5 match no paroquant linear"):
        _plan(launch_home, env={"RADIANCE_PQ_CHECKALL": "5:5"})


def test_missing_model_dir_names_file_line_key_and_path(launch_home):
    with pytest.raises(StackFileError) as e:
        _plan(launch_home)
    msg = str(e.value)
    assert msg.startswith(f"{launch_home / 'stacks.yaml'}:5: stacks.s.model: model dir {launch_home / 'models' / 'm'} does not exist")


def test_model_quant_mismatch(launch_home):
    _model(launch_home, quant="pq2")
    with pytest.raises(StackFileError, match=r"stacks.s.model: .* is quantized as 'pq2' .* but the stack says quant: paroquant"):
        _plan(launch_home)


def test_chat_template_missing_unreadable_or_broken(launch_home):
    _model(launch_home)
    text = SMALL.replace("chat_template: model", "chat_template: t/chat.jinja")
    with pytest.raises(TemplateError) as e:
        _plan(launch_home, text)
    assert str(e.value).startswith(f"{launch_home / 'stacks.yaml'}:11: stacks.s.chat_template: chat template "
                                   f"{launch_home / 't' / 'chat.jinja'} does not exist")
    assert "no fallback" in str(e.value)
    (launch_home / "t" / "chat.jinja").mkdir(parents=True)
    with pytest.raises(TemplateError, match="is a directory"):
        _plan(launch_home, text)
    (launch_home / "t" / "chat.jinja").rmdir()
    (launch_home / "t" / "chat.jinja").write_bytes(b"\xff\xfe{{ bad")
    with pytest.raises(TemplateError, match="cannot be read"):
        _plan(launch_home, text)
    (launch_home / "t" / "chat.jinja").write_text("{% for m in messages %}{{ m.content }}\n")
    with pytest.raises(TemplateError, match=r"chat.jinja:1: not a valid jinja2 template"):
        _plan(launch_home, text)
    (launch_home / "t" / "chat.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert _plan(launch_home, text).chat_template == launch_home / "t" / "chat.jinja"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_chat_template_without_read_permission(launch_home):
    _model(launch_home)
    t = launch_home / "chat.jinja"
    t.write_text("x")
    t.chmod(0)
    with pytest.raises(TemplateError, match="not readable"):
        _plan(launch_home, SMALL.replace("chat_template: model", f"chat_template: {t}"))


def test_chat_template_env_overrides_stack_and_is_blamed(launch_home):
    _model(launch_home)
    with pytest.raises(TemplateError, match=r"^RADIANCE_CHAT_TEMPLATE: chat template /nope.jinja does not exist"):
        _plan(launch_home, env={"RADIANCE_CHAT_TEMPLATE": "/nope.jinja"})


def test_template_under_a_mount_is_addressed_through_it(launch_home):
    m = _model(launch_home)
    (m / "chat.jinja").write_text("{{ messages }}")
    outside = launch_home.parent / "elsewhere" / "t.jinja"
    outside.parent.mkdir()
    outside.write_text("{{ messages }}")
    pod = SMALL.replace("arch: cpu", "arch: sm_86\n    devices: [0]\n    runtime: podman\n    image: img")
    pod = pod.replace("    chat_template: model\n", "")
    p = _plan(launch_home, pod + f"    chat_template: {m / 'chat.jinja'}\n")
    assert p.chat_template == m / "chat.jinja"
    assert not any(x.path == m / "chat.jinja" for x in p.mounts)  # the model mount carries it
    p = _plan(launch_home, pod + f"    chat_template: {outside}\n")
    assert [x.podman_arg() for x in p.mounts if x.path == outside] == [f"{outside}:{outside}:ro"]
    assert vllm_argv(p)[vllm_argv(p).index("--chat-template") + 1] == str(outside)


def test_cli_reports_errors_without_traceback(launch_home):
    bad = _file(launch_home, "stacks:\n  s:\n    arch: cpu\n    port: [\n", "bad.yaml")
    res = CliRunner().invoke(app, ["s", "--stacks", str(bad), "--dry-run"])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"radiance-launch: error: {bad}:5:") and "not valid YAML" in res.stderr
    res = CliRunner().invoke(app, ["nope", "--stacks", str(EXAMPLE), "--dry-run"])
    assert res.exit_code == 2 and "no stack named 'nope'; stacks in this file: demo, paro" in res.stderr
    res = CliRunner().invoke(app, ["demo", "--stacks", str(EXAMPLE), "--mode", "fast", "--dry-run"])
    assert res.exit_code == 2 and "'fast' is not one of 'eval'," in res.output


def test_parse_is_pure_of_the_filesystem():
    # host tools read stacks whose models live elsewhere: loading does not look at model dirs
    sf = parse_stacks(SMALL.replace("model: m", "model: /no/such/dir"), Path("x.yaml"))
    assert sf.get("s").model == "/no/such/dir"


def test_console_script_dry_run(launch_home):
    """The installed entry point (radiance.launcher.cli:main), as scripts and units call it."""
    import shutil
    import subprocess
    import sys

    exe = Path(sys.executable).parent / "radiance-launch"
    exe = str(exe) if exe.exists() else shutil.which("radiance-launch")
    assert exe, "radiance-launch is not installed beside this interpreter"
    out = subprocess.run([exe, "demo", "--stacks", str(EXAMPLE), "--dry-run"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "-m vllm.entrypoints.openai.api_server" in out.stdout and out.stdout.startswith("# radiance-launch demo")


def test_podman_stack_on_the_host_points_at_its_unit(launch_home):
    from radiance.launcher.launch import in_container

    if in_container():
        pytest.skip("running inside a podman container: the launcher would go on to the device check")
    res = CliRunner().invoke(app, ["paro", "--stacks", str(EXAMPLE)])
    assert res.exit_code == 1
    assert "stack 'paro' runs in podman (localhost/radiance-rocm:latest): start it with `vllm-switch paro`" in res.stderr


def test_a_quantized_prod_stack_names_its_chat_template(launch_home):
    """Unset in prod is refused (the checkpoint's own template is not chosen silently); `model`
    binds the bundled one, named with its sha256; eval mode tolerates unset and names what binds."""
    import hashlib

    m = _model(launch_home)
    unset = SMALL.replace("    chat_template: model\n", "")
    with pytest.raises(StackFileError, match=r"stacks.yaml:3: stacks.s.chat_template: unset, but a quantized stack "
                                             r"in prod mode names its chat template .* `model` to serve the "
                                             r"checkpoint's bundled template knowingly"):
        _plan(launch_home, unset, "prod")
    p = _plan(launch_home, mode="prod")
    digest = hashlib.sha256(BUNDLED_TEMPLATE.encode()).hexdigest()
    assert p.chat_template is None and "--chat-template" not in vllm_argv(p)  # vLLM applies the model's own
    assert p.template.describe() == (f"{m / 'chat_template.jinja'} sha256 {digest[:16]}, the model's bundled "
                                     "template (chat_template: model)")
    ev = _plan(launch_home, unset, "eval")
    assert ev.template.origin == "" and "(chat_template unset)" in ev.template.describe()
    # a tokenizer_config.json's template, as most Hugging Face exports carry it
    (m / "chat_template.jinja").unlink()
    (m / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    p = _plan(launch_home, mode="prod")
    assert p.template.file == m / "tokenizer_config.json"
    assert p.template.sha256 == hashlib.sha256(b"{{ messages }}").hexdigest()
    (m / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% if %}"}))
    with pytest.raises(StackFileError, match=r"tokenizer_config.json: its chat_template is not a valid jinja2"):
        _plan(launch_home, mode="prod")
    (m / "tokenizer_config.json").write_text("{}")
    with pytest.raises(StackFileError, match=r"stacks.s.chat_template: `model`, but .* bundles no chat template"):
        _plan(launch_home, mode="prod")
    assert _plan(launch_home, unset, "eval").template is None  # eval: nothing bound, and the dry run says so
    bf16 = unset.replace("quant: paroquant", "quant: none").replace('    check_shapes: ["1152:896"]\n', "")
    _model(launch_home, quant=None)
    assert _plan(launch_home, bf16, "prod").template.origin == ""  # an unquantized baseline may leave it unset


def test_int8_activations_are_refused_on_gfx1201(launch_home):
    """gfx1201's kernels have no int8 path: RADIANCE_PQ_I8 there is an error, not a cache-key change."""
    _model(launch_home)
    gfx = GPU_SPEC.format(arch="gfx1201", devices="    devices: [0]\n", seqs="    max_num_seqs: 8\n")
    with pytest.raises(PlanError, match=r"RADIANCE_PQ_I8 \(environment\): RADIANCE_PQ_I8=1, but gfx1201 has no int8 "
                                        r"activation path \(its HIP kernels run fp8 x fp8 WMMA only\)"):
        _plan(launch_home, gfx, "prod", {"RADIANCE_PQ_I8": "1"}, name="g")
    with pytest.raises(StackFileError, match=r"stacks.g.prod.env: RADIANCE_PQ_I8=1, but gfx1201"):
        _plan(launch_home, gfx + "    prod: {env: {RADIANCE_PQ_I8: 1}}\n", "prod", name="g")
    assert _plan(launch_home, gfx, "prod", {"RADIANCE_PQ_I8": "0"}, name="g").cache_key  # the default: fine
    sm = GPU_SPEC.format(arch="sm_86", devices="    devices: [0]\n", seqs="    max_num_seqs: 8\n")
    assert _plan(launch_home, sm, "prod", {"RADIANCE_PQ_I8": "1"}, name="g").cache_key.endswith("-i8")  # NVIDIA: W4A8
