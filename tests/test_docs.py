"""Every RADIANCE_* knob used in the code is in radiance/knobs.py and in the README's table."""

import re
from pathlib import Path

from radiance.knobs import KNOBS

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ["radiance", "plugin", "kernels", "launcher", "deploy", "healthchecks", "quantize", "units", "images"]
KNOB_RE = re.compile(r"\bRADIANCE_[A-Z0-9_]*[A-Z0-9]\b")


def _readme_rows() -> dict[str, list[str]]:
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        m = re.match(r"\|\s*`(RADIANCE_[A-Z0-9_]+)`\s*\|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_readme_table_matches_knobs():
    rows = _readme_rows()
    assert set(rows) == set(KNOBS), "README knob table and radiance/knobs.py disagree"
    for name, (default, graph, doc) in rows.items():
        k = KNOBS[name]
        assert default == (f"`{k.default}`" if k.default is not None else "unset"), name
        assert graph == ("yes" if k.graph else "no"), name
        assert doc == k.doc, f"{name}: the README's text and radiance/knobs.py's differ"


def test_code_uses_only_registered_knobs():
    used = set()
    for d in CODE_DIRS:
        for p in (ROOT / d).rglob("*"):
            if p.is_file() and p.suffix in {".py", ".j2", ".sh", ".hip", ".h", ".cu", ""} and "tests" not in p.parts:
                used |= set(KNOB_RE.findall(p.read_text(errors="ignore")))
    assert used - set(KNOBS) == set(), "register these in radiance/knobs.py and the README table"


def test_perf_page_is_generated_from_the_committed_results():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(ROOT / "bench" / "perf_page.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
