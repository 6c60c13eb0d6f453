"""radiance.atomic.directory: a run killed at any step of the swap leaves the complete old or the
complete new directory, the next run sweeps what dead runs left, and a build that cannot fit is
refused before it writes. The kills are real SIGKILLs of a real process at each file-system call it
makes (counted with Python's audit hooks), on a real file system."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from radiance import atomic

OLD = {"a.safetensors": "old-a" * 1000, "b.json": "old-b", "sub/c.bin": "old-c" * 100}
NEW = {"a.safetensors": "new-a" * 2000, "b.json": "new-b", "d.txt": "new-d"}
# File-system changes Python announces (audit events; the exchange shows as the lookup of renameat2
# right before it): each is a place a crash can happen.
CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from radiance import atomic

    path, kill_at, files = Path(sys.argv[1]), int(sys.argv[2]), eval(sys.argv[3])
    seen = 0
    armed = False

    def hook(event, args):
        global seen
        if armed and event in ("os.rename", "os.remove", "os.rmdir", "shutil.rmtree", "ctypes.dlsym"):
            seen += 1
            if seen == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)
    with atomic.directory(path) as tmp:
        for rel, text in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
        armed = True  # the new directory is complete: what follows is the swap
""")


def _write(d: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)


def _read(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): p.read_text() for p in sorted(d.rglob("*")) if p.is_file()}


def _leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}."))


def test_a_kill_at_any_step_of_the_swap_leaves_the_old_or_the_new_directory(tmp_path):
    outcomes = set()
    for kill_at in range(1, 60):
        path = tmp_path / str(kill_at) / "model"
        _write(path, OLD)
        r = subprocess.run([sys.executable, "-c", CHILD, str(path), str(kill_at), repr(NEW)], capture_output=True,
                           text=True, timeout=60)
        killed = r.returncode == -signal.SIGKILL
        assert killed or r.returncode == 0, r.stderr
        got = _read(path) if path.is_dir() else {}
        assert got in (OLD, NEW), f"killed at file-system call {kill_at}: {path} holds {sorted(got)}"
        outcomes.add("old" if got == OLD else "new")
        # the next run (never killed) replaces it and leaves nothing of the dead one behind
        r = subprocess.run([sys.executable, "-c", CHILD, str(path), "0", repr(OLD)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and _read(path) == OLD and _leftovers(path) == [], (r.stderr, _leftovers(path))
        if not killed:
            break
    assert outcomes == {"old", "new"} and not killed, outcomes  # the kills covered the whole swap


def test_a_dead_runs_temporaries_are_swept_and_a_live_ones_kept(tmp_path):
    path = tmp_path / "out"
    live = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from radiance import atomic
        with atomic.directory(Path({str(path)!r})) as tmp:
            (tmp / "x").write_text("building")
            print(tmp, flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        live_tmp = Path(live.stdout.readline().strip())
        dead = tmp_path / ".out.k1lled.tmp"  # what a run killed before this code left: no lock
        dead.mkdir()
        (dead / "shard.safetensors").write_bytes(b"x" * 1000)
        with atomic.directory(path) as tmp:
            (tmp / "y").write_text("done")
        assert not dead.exists(), "a dead run's temporary survived the next run"
        assert live_tmp.is_dir() and (live_tmp / "x").read_text() == "building", "a live build was swept"
        assert _read(path) == {"y": "done"}
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait()
    atomic.sweep(path)
    assert _leftovers(path) == []


def test_an_old_directory_a_dead_run_left_renamed_aside_comes_back(tmp_path):
    """Where the file system cannot exchange, the old directory is renamed aside first; a run that
    died right then left no `out` at all."""
    path = tmp_path / "out"
    aside = tmp_path / ".out.abc123.old"
    _write(aside, OLD)
    atomic.sweep(path)
    assert _read(path) == OLD and _leftovers(path) == []


def test_a_build_that_cannot_fit_is_refused_before_it_writes(tmp_path):
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    with pytest.raises(atomic.NoSpaceError, match=r"needs about .* GiB, but .* GiB free"):
        with atomic.directory(tmp_path / "out", needs_bytes=free * 2):
            raise AssertionError("the body must not run")
    assert _leftovers(tmp_path / "out") == [] and not (tmp_path / "out").exists()


@pytest.mark.integration
def test_a_killed_quantize_leaves_nothing_the_next_run_keeps(qwen_bf16_dir, tmp_path):
    """The real `radiance quantize`, SIGKILLed while it writes: its temporary (the old code left it,
    as large as the checkpoint) is gone after the next run, whose output is complete."""
    from radiance.testing.tiny_model import write_tiny_qwen

    exe = Path(sys.executable).with_name("radiance")
    out = tmp_path / "out"
    run = subprocess.Popen([str(exe), "quantize", str(qwen_bf16_dir), str(out), "--format", "paroquant",
                            "--rotation", "identity", "--krot", "1"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not any(p.suffix == ".tmp" and any(p.iterdir()) for p in tmp_path.glob(".out.*.tmp")):
        assert run.poll() is None and time.monotonic() < deadline, "quantize ended before it could be killed"
        time.sleep(0.05)
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert [p.name for p in tmp_path.glob(".out.*.tmp")], "the killed run left no temporary to sweep"
    tiny = write_tiny_qwen(tmp_path / "tiny")
    r = subprocess.run([str(exe), "quantize", str(tiny), str(out), "--format", "paroquant"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert _leftovers(out) == [], _leftovers(out)
    assert (out / "config.json").is_file() and (out / "SHA256SUMS").is_file()


@pytest.mark.integration
def test_quantize_into_a_file_system_too_small_is_refused_at_once(systemd_image, tmp_path):
    """A real small file system (podman's --tmpfs of 256 KiB) and the real CLI of this checkout: the
    run stops before it writes, naming what it needs and what is free."""
    from radiance.testing.podman import REPO, podman
    from radiance.testing.tiny_model import write_tiny_qwen

    tiny = write_tiny_qwen(tmp_path / "tiny")
    interp = Path(sys.base_prefix)
    r = podman("run", "--rm", "--network=none", "--tmpfs", "/small:size=256k", "-v", f"{REPO}:{REPO}:ro",
               "-v", f"{interp}:{interp}:ro", "-v", f"{tiny}:{tiny}:ro", "--env", "RADIANCE_HOME=/tmp/home",
               systemd_image, str(Path(sys.executable).with_name("radiance")), "quantize", str(tiny), "/small/out",
               "--format", "paroquant", check=False, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error: /small/out needs about" in r.stderr and "but /small has 0.00 GiB free" in r.stderr, r.stderr
