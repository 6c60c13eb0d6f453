"""launcher/supervise.py with real child processes: output passed through, a traceback turned into a
named cause and a non-zero exit even when the child exits 0 (as vLLM's API server does after its
engine died), exit statuses and stop signals passed on."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

from radiance.launcher import supervise

CRASH_THEN_EXIT_0 = textwrap.dedent("""
    print("(APIServer pid=1) INFO 12-06 17:16:09 [api_server.py:1] starting", flush=True)
    pre = "(Worker pid=42) ERROR 12-06 17:16:44 [multiproc_executor.py:1063] "
    print(pre + "Traceback (most recent call last):")
    print(pre + '  File "/src/radiance/plugin/cpu_gemm.py", line 31, in <lambda>')
    print(pre + "    prep.gemm = lambda x, bias: linear(x, None, bias)")
    print(pre + "TypeError: linear(): argument 'weight' (position 2) must be Tensor, not NoneType")
    print("INFO:     Finished server process [1]")
    print("nanobind: leaked 12 instances!")
""")


def _supervise(code: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(supervise.command([sys.executable, "-c", code]), capture_output=True, text=True,
                          timeout=60, **kw)


def test_a_crash_is_named_and_exits_nonzero_although_the_child_exits_0():
    p = _supervise(CRASH_THEN_EXIT_0)
    assert p.returncode == 1
    assert "Finished server process" in p.stdout and "nanobind" in p.stdout  # passed through unchanged
    last = p.stderr.strip().splitlines()[-1]
    assert last == ("radiance-launch: the server died: TypeError: linear(): argument 'weight' (position 2) must "
                    "be Tensor, not NoneType (at /src/radiance/plugin/cpu_gemm.py:31, in Worker pid=42)")


def test_exit_statuses_pass_through():
    assert _supervise("print('bye')").returncode == 0
    p = _supervise("import sys; sys.exit(3)")
    assert p.returncode == 3 and "vLLM exited with status 3" in p.stderr


def test_sigterm_reaches_the_child_and_its_clean_exit_is_the_launchers():
    code = textwrap.dedent("""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: (print("child: SIGTERM, shutting down", flush=True), sys.exit(0)))
        print("child: ready", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen(supervise.command([sys.executable, "-c", code]), stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "child: ready"
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "child: SIGTERM, shutting down" in out and time.monotonic() - t < 10


def test_a_signal_death_is_passed_on_as_that_signal():
    p = _supervise("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert p.returncode == -signal.SIGTERM


def _stop_with_sigterm(code: str) -> tuple[int, str, str]:
    proc = subprocess.Popen(supervise.command([sys.executable, "-c", code]), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "child: ready"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def test_a_traceback_printed_while_stopping_is_a_stop_not_a_crash():
    # vLLM's API server logs "EngineDeadError" from its output handler when a SIGTERM takes the engine down
    code = textwrap.dedent("""
        import signal, sys, time
        def stop(*a):
            print("(APIServer pid=1) ERROR 12-06 20:42:33 [async_llm.py:906] Traceback (most recent call last):")
            print('(APIServer pid=1) ERROR 12-06 20:42:33 [async_llm.py:906]   File "/v/core_client.py", line 1235, in get')
            print("(APIServer pid=1) ERROR 12-06 20:42:33 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: gone")
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        print("child: ready", flush=True)
        time.sleep(60)
    """)
    rc, out, err = _stop_with_sigterm(code)
    assert rc == 0, err
    assert "EngineDeadError" in out and "the server died" not in err
    assert "vLLM stopped on SIGTERM; its shutdown printed: vllm.v1.engine.exceptions.EngineDeadError" in err


def test_a_crash_before_the_stop_stays_a_crash():
    code = CRASH_THEN_EXIT_0 + textwrap.dedent("""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        print("child: ready", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen(supervise.command([sys.executable, "-c", code]), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    while proc.stdout.readline().strip() != "child: ready":
        pass
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "the server died: TypeError" in err
