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


def _resolve(path: str, contexts):
    """The object a dotted name names, from `radiance` or one of the context modules; None if none."""
    import importlib

    def walk(obj, parts):
        for p in parts:
            obj = getattr(obj, p) if hasattr(obj, p) else importlib.import_module(f"{obj.__name__}.{p}")
        return obj

    parts = path.split(".")
    bases = [importlib.import_module("radiance")] if parts[0] == "radiance" else contexts
    for base in bases:
        try:
            return walk(base, parts[1:] if parts[0] == "radiance" else parts)
        except (AttributeError, ImportError, TypeError):
            continue
    return None


def test_interfaces_page_names_what_exists():
    """docs/interfaces.md is checked against the code: every `radiance.<module>` it names, every
    signature `name(...)` and class it lists under a module, exists there (a dotted name resolves
    from the bullet's module, the one named last, or a package above them)."""
    import importlib
    import inspect

    missing = []
    for bullet in re.split(r"\n(?=- )", (ROOT / "docs" / "interfaces.md").read_text()):
        if not bullet.startswith("- `radiance"):
            continue
        chain: list = []  # the modules named so far in this bullet, latest first
        for raw in re.findall(r"`([^`]+)`", bullet):
            name = raw.split("(")[0].split(" ")[0].split("[")[0].rstrip(":,")
            if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", name) or name.startswith("torch.") or "/" in raw:
                continue
            first = name.split(".")[0]
            contexts = []
            for m in chain:  # each named module and the packages above it
                while m is not None and m not in contexts:
                    contexts.append(m)
                    parent = m.__name__.rpartition(".")[0]
                    m = importlib.import_module(parent) if parent else None
            obj = _resolve(name, contexts)
            if obj is None:
                if (first.isupper() and "." not in name) or ("." in name and not name.startswith("radiance.")
                                                             and _resolve(first, contexts) is None):
                    continue  # an environment variable or file name, an attribute of a value the text names
                if "(" in raw or name.startswith("radiance.") or first[:1].isupper():
                    missing.append(f"{bullet.split('`')[1]}: {raw.splitlines()[0]}")
                continue
            module = obj if inspect.ismodule(obj) else inspect.getmodule(obj) if "." in name else None
            if module is not None and module.__name__.startswith("radiance"):
                chain.insert(0, module)
    assert missing == [], "docs/interfaces.md names what the code does not have"
