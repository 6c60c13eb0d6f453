"""The first exception in a vLLM server's output: what killed it, and where.

vLLM's processes (API server, engine core, workers) print into one stream, each line prefixed with
its process and log level, e.g.

    (Worker pid=3934) ERROR 12-06 17:16:44 [multiproc_executor.py:1063] Traceback (most recent call last):
    (Worker pid=3934) ERROR 12-06 17:16:44 [multiproc_executor.py:1063]   File "/x/cpu_gemm.py", line 31, in <lambda>
    (Worker pid=3934) ERROR 12-06 17:16:44 [multiproc_executor.py:1063] TypeError: linear(): argument 'weight' ...

and after the engine dies the API server adds its own errors and, at exit, pages of unrelated noise
(nanobind leak reports, resource-tracker warnings). The cause is the first traceback: its final line
(the exception) and its innermost frame. Tracebacks logged below ERROR are handled ones and skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

_PREFIX = re.compile(
    r"^(?:\((?P<proc>[^()]*)\)\s+)?"  # (Worker pid=3934)
    r"(?:\[rank\d+\]:\s?)?"  # torch.distributed's rank prefix
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s?)?")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+)')
_HEADER = "Traceback (most recent call last):"
_NOISE = re.compile(r"^(nanobind: |\s*- leaked |\s*- \.\.\. skipped|See https://nanobind|.*resource_tracker|\s+warnings\.warn)")


_LIBRARY = re.compile(r"^.*/(?:site|dist)-packages/")


def _short(file: str) -> str:
    return _LIBRARY.sub("", file)


def _is_ours(file: str) -> bool:
    """radiance's own code: its installed package, or a checkout outside any library folder."""
    return "-packages/radiance/" in file or (file.startswith("/") and not (_LIBRARY.match(file) or "/lib/python3" in file))


@dataclass(frozen=True)
class Crash:
    error: str  # the exception line, e.g. "TypeError: linear(): argument 'weight' ..."
    where: str  # the innermost frame, "file:line" (library paths from their package down)
    ours: str  # the innermost frame in radiance's code when that is not the innermost one, else ""
    process: str  # vLLM's process prefix ("Worker pid=3934"), "" when unprefixed

    def summary(self) -> str:
        via = f", via {self.ours}" if self.ours else ""
        who = f", in {self.process}" if self.process else ""
        return f"{self.error} (at {self.where}{via}{who})"


def _split(line: str) -> tuple[str, str | None, str]:
    m = _PREFIX.match(line)
    return (m.group("proc") or ""), m.group("level"), line[m.end():]


DETAIL_LINES = 1  # a multi-line exception message (pydantic's: the error is on its second line)
_PYDANTIC_TAIL = re.compile(r"\s*\[type=.*$")  # pydantic's echo of the whole input after the message


class CrashScanner:
    """Fed line by line (a live stream or a log file); keeps the first complete traceback."""

    def __init__(self) -> None:
        self._found: Crash | None = None
        self._detail: list[str] | None = None  # indented lines after the exception line, while they come
        self._open: dict[str, list[str]] = {}  # process -> its open traceback's frames, "file:line"

    @property
    def crash(self) -> Crash | None:
        if self._found is None or not self._detail:
            return self._found
        return replace(self._found, error=" ".join([self._found.error, *self._detail]))

    def feed(self, line: str) -> None:
        # a raw stream's line: vLLM's workers end theirs with \r\n, progress bars redraw with \r
        proc, level, text = _split(line.rstrip("\r\n").rsplit("\r", 1)[-1])
        if self._found is not None:
            if self._detail is not None and proc == self._found.process:
                if text[:1].isspace() and text.strip() and len(self._detail) < DETAIL_LINES:
                    self._detail.append(_PYDANTIC_TAIL.sub("", text.strip()))
                else:
                    self._found, self._detail = self.crash, None  # the message is complete
            return
        if text == _HEADER:
            if level in (None, "ERROR", "CRITICAL"):
                self._open[proc] = []
            return
        if proc not in self._open:
            return
        if m := _FRAME.match(text):
            self._open[proc].append(f"{m.group('file')}:{m.group('line')}")
        elif text and not text[0].isspace():  # the first unindented line ends the traceback
            frames = self._open.pop(proc)
            if frames:
                ours = next((f for f in reversed(frames) if _is_ours(f)), "")
                self._found = Crash(text.strip(), _short(frames[-1]), ours if ours != frames[-1] else "", proc)
                self._detail = []


def first_crash(lines: Iterable[str]) -> Crash | None:
    scanner = CrashScanner()
    for line in lines:
        scanner.feed(line)
    return scanner.crash


def tail(lines: list[str], n: int = 25) -> list[str]:
    """The last `n` lines that are not exit-time noise (leak reports a dying process prints)."""
    return [ln for ln in lines if not _NOISE.match(ln)][-n:]
