"""docs/observability.md (linked from the README) lists exactly the metrics
the exporter registers, with their types, and every probe and exporter flag."""

from __future__ import annotations

import re
from pathlib import Path

from radiance.healthchecks import exporter

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
ROW = re.compile(r"^\|\s*`(radiance_[a-z0-9_]+)`\s*\|\s*(\w+)\s*\|")


def _documented_metrics() -> dict[str, str]:
    return {m.group(1): m.group(2) for line in DOC.read_text().splitlines() if (m := ROW.match(line))}


def _exposed_name(fam) -> str:
    # The name a query uses: prometheus_client keeps a counter's/info's family name without its suffix.
    return {"counter": f"{fam.name}_total", "info": f"{fam.name}_info"}.get(fam.type, fam.name)


def test_doc_table_matches_registered_metrics(tmp_path):
    targets = [exporter.Target("demo", "http://127.0.0.1:9", 9, "none", "demo")]
    registry, _ = exporter.build(targets, state_root=tmp_path)
    registered = {_exposed_name(f): f.type for f in registry.collect()}
    documented = _documented_metrics()
    assert documented, f"no metric table in {DOC}"
    assert set(documented) == set(registered), (
        f"only in {DOC.name}: {sorted(set(documented) - set(registered))}; "
        f"only in the exporter: {sorted(set(registered) - set(documented))}")
    assert documented == registered, f"{DOC.name} types differ from the exporter's"


def test_doc_documents_every_probe_and_exporter_flag():
    import typer
    from typer.main import get_command

    from radiance.healthchecks import cli

    app = typer.Typer()
    app.callback()(lambda: None)
    cli.register(app)
    root = get_command(app)
    section = DOC.read_text()
    commands = {"probe live": root.commands["probe"].commands["live"],
                "probe ready": root.commands["probe"].commands["ready"],
                "probe watch": root.commands["probe"].commands["watch"],
                "exporter": root.commands["exporter"]}
    for name, cmd in commands.items():
        assert f"radiance {name}" in section, name
        for param in cmd.params:
            for flag in param.opts:
                if flag.startswith("--") and flag != "--help":
                    assert flag in section, f"`radiance {name} {flag}` is not in {DOC}"
