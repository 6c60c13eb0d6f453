"""Fingerprint every kernel variant the offline compile check builds, to show a refactor changed no code.

    python bench/sass_fingerprint.py record BEFORE.json     # on the old commit (no GPU needed)
    python bench/sass_fingerprint.py record AFTER.json      # on the new one
    python bench/sass_fingerprint.py compare BEFORE.json AFTER.json

`record` runs kernels/tests/test_offline_compile.py's kernel tests (every path and tile the tables
pick, for sm_75, sm_86 and sm_90) with this file as a pytest plugin: each compiled variant's SASS
instruction text (cuobjdump -sass, addresses stripped) is hashed and written out beside its kernel
name and constexprs. `compare` exits 1 unless both hold the same builds with the same SASS.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS: list[list] = []


def sass_hash(cubin: bytes) -> tuple[str, int]:
    from radiance.testing.offline_compile import cuda_tool

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([cuda_tool("cuobjdump"), "-sass", f.name], capture_output=True, text=True, check=True).stdout
    ins = [re.sub(r"/\*[0-9a-f]{4,}\*/", "", ln).strip() for ln in out.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", ln)]
    return hashlib.sha1("\n".join(ins).encode()).hexdigest()[:16], len(ins)


def pytest_configure(config):
    """As a plugin: hash each build compile_only records (its resource_usage call sees the cubin)."""
    from radiance.testing import offline_compile as oc

    hashes, usage, compile_only = [], oc.resource_usage, oc.compile_only

    def resource_usage(cubin):
        hashes.append(sass_hash(cubin))
        return usage(cubin)

    @contextlib.contextmanager
    def recording(arch):
        start = len(hashes)
        with compile_only(arch) as built:
            yield built
        RESULTS.extend([arch, c.kernel, c.variant, *hashes[start + i]] for i, c in enumerate(built))

    oc.resource_usage, oc.compile_only = resource_usage, recording


def pytest_sessionfinish(session, exitstatus):
    Path(os.environ["SASS_FINGERPRINT_OUT"]).write_text(json.dumps(RESULTS, indent=0) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "record":
        env = os.environ | {"SASS_FINGERPRINT_OUT": str(Path(argv[1]).resolve()),
                            "PYTHONPATH": f"{Path(__file__).parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "sass_fingerprint",
                               "kernels/tests/test_offline_compile.py", "-k", "kernels_compile_for"], cwd=ROOT,
                              env=env).returncode
    if len(argv) == 3 and argv[0] == "compare":
        # a variant key can repeat (the same constexprs built again for another call's specialization):
        # compare the builds as multisets
        a, b = (Counter(map(tuple, json.loads(Path(p).read_text()))) for p in argv[1:])
        for row in sorted((a - b).elements()):
            print("only in", argv[1], *row)
        for row in sorted((b - a).elements()):
            print("only in", argv[2], *row)
        print(f"{sum(a.values())} / {sum(b.values())} builds; {sum((a - b).values())} of the first without an "
              "identical build in the second")
        return 0 if a == b else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
