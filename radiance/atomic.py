"""Write-then-rename helpers: nothing half-written stays behind, and nothing complete is lost.

`directory(path)` builds a new directory beside `path` and swaps it in with one atomic rename
(renameat2 RENAME_EXCHANGE): at every instant `path` is the complete old directory or the complete
new one, and the old one is removed only once the new one is in place. Where the file system cannot
exchange, the old directory is first renamed aside, and a run that dies between the two renames is
repaired by the next one (the old directory is renamed back). Each build holds a lock file beside
its temporary directory for its whole life, so the next run for the same `path` removes the
temporaries of runs that died (SIGKILL, a crash, power loss: tens of GB for a 27B checkpoint) and
never those of a run still going. With `needs_bytes` the run is refused before it starts when the
file system cannot hold the output.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
# what the free-space check leaves for the file system and whatever else writes meanwhile
SPACE_MARGIN = 0.05


class NoSpaceError(OSError):
    """The file system cannot hold the output; the message says how much is needed and free."""


def write_text(path: Path, text: str, mode: int | None = None) -> None:
    write_bytes(path, text.encode(), mode)


def write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """`mode`: the file's permissions (default: mkstemp's 0600, readable by its owner only)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where this file system (or C library) cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except AttributeError:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, f"exchanging {a} and {b}: {os.strerror(err)}")


def _ours(path: Path) -> re.Pattern[str]:
    """Names of `path`'s temporaries: `.NAME.<random>.tmp` (a build), `.NAME.<random>.old` (the old
    directory renamed aside), `.NAME.<random>.lock` (held while a build runs). The random part has no
    dot, so a sibling named `NAME.x` does not match."""
    return re.compile(rf"^\.{re.escape(path.name)}\.([A-Za-z0-9_]+)\.(tmp|old|lock)$")


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def sweep(path: Path) -> list[Path]:
    """Remove the temporaries of dead runs for `path` (those of a live run are locked and kept); put
    back an old directory a dead run left renamed aside. The removed paths."""
    path, pattern = Path(path), _ours(Path(path))
    runs: dict[str, list[Path]] = {}
    for p in path.parent.iterdir() if path.parent.is_dir() else []:
        if m := pattern.match(p.name):
            runs.setdefault(m.group(1), []).append(p)
    removed = []
    for token, found in sorted(runs.items()):
        lock = FileLock(str(path.parent / f".{path.name}.{token}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue  # a run still building
        try:
            for p in sorted(found, key=lambda q: q.suffix != ".old"):
                if p.suffix == ".old" and not path.exists():
                    os.rename(p, path)  # died between its two renames: the old directory goes back
                    continue
                if p.suffix != ".lock":
                    _remove(p)
                    removed.append(p)
        finally:
            lock.release()
            _remove(path.parent / f".{path.name}.{token}.lock")
    return removed


def check_space(where: Path, needs_bytes: int, what: str) -> None:
    free = shutil.disk_usage(where).free
    if free < needs_bytes * (1 + SPACE_MARGIN):
        raise NoSpaceError(errno.ENOSPC, f"{what} needs about {needs_bytes / 2**30:.2f} GiB, but {where} has "
                                         f"{free / 2**30:.2f} GiB free; free some space or write it elsewhere")


@contextlib.contextmanager
def directory(path: Path, needs_bytes: int | None = None) -> Iterator[Path]:
    """Yield a temporary directory beside `path`; on success it takes `path`'s place (the old one
    removed after), on error it is removed. Dead runs' temporaries are swept first; `needs_bytes`:
    refuse (NoSpaceError) before anything is written when the file system cannot hold that much."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep(path)
    if needs_bytes is not None:
        check_space(path.parent, needs_bytes, str(path))
    fd, lock_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".lock")
    os.close(fd)
    lock = FileLock(lock_name)
    lock.acquire()  # held until the end: the next run's sweep leaves this build alone
    tmp = Path(lock_name).with_suffix(".tmp")
    try:
        tmp.mkdir()
        yield tmp
        if not path.exists():
            os.rename(tmp, path)
        elif _exchange(tmp, path):  # tmp now holds the old directory
            shutil.rmtree(tmp)
        else:
            aside = tmp.with_suffix(".old")
            os.rename(path, aside)
            os.rename(tmp, path)
            shutil.rmtree(aside)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        lock.release()
        _remove(Path(lock_name))
