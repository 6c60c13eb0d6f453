"""Every RADIANCE_* knob used in the code is in radiance/knobs.py, and the generated pages match their sources."""

import re
from pathlib import Path

from radiance.knobs import KNOBS

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ["radiance", "plugin", "kernels", "launcher", "deploy", "healthchecks", "quantize", "units", "images"]
KNOB_RE = re.compile(r"\bRADIANCE_[A-Z0-9_]*[A-Z0-9]\b")


def test_knobs_page_is_generated_from_the_registry():
    from radiance.knobs import page

    assert (ROOT / "docs" / "knobs.md").read_text() == page(), "run: python -m radiance.knobs > docs/knobs.md"


def test_code_uses_only_registered_knobs():
    used = set()
    for d in CODE_DIRS:
        for p in (ROOT / d).rglob("*"):
            if p.is_file() and p.suffix in {".py", ".j2", ".sh", ".hip", ".h", ".cu", ""} and "tests" not in p.parts:
                used |= set(KNOB_RE.findall(p.read_text(errors="ignore")))
    assert used - set(KNOBS) == set(), "register these in radiance/knobs.py, then regenerate docs/knobs.md"


def test_nothing_cites_a_document_a_reader_cannot_see():
    """Comments and docs say the reason itself: no pointer to notes outside this repository."""
    cited = re.compile(r"\bthe seed's\b|\bthe seed builds\b|\.\./shared\b|\bDESIGN\.md\b|\bFACTS\.md\b")
    hits = [f"{p.relative_to(ROOT)}:{n}" for d in [*CODE_DIRS, "docs", "bench"] for p in (ROOT / d).rglob("*")
            if p.is_file() and p.suffix in {".py", ".md", ".sh", ".j2", ".yaml", ""} or p.name.startswith("Containerfile")
            for n, line in enumerate(p.read_text(errors="ignore").splitlines(), 1) if cited.search(line)]
    hits += [f"README.md:{n}" for n, line in enumerate((ROOT / "README.md").read_text().splitlines(), 1)
             if cited.search(line)]
    assert hits == [], "say the reason itself"


def test_perf_page_is_generated_from_the_committed_results():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(ROOT / "bench" / "perf_page.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
