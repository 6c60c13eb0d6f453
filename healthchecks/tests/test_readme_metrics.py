"""The README's metric table lists exactly the metrics the exporter registers, with their types."""

from __future__ import annotations

import re
from pathlib import Path

from radiance.healthchecks import exporter

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\|\s*`(radiance_[a-z0-9_]+)`\s*\|\s*(\w+)\s*\|")


def _readme_metrics() -> dict[str, str]:
    text = README.read_text()
    start = text.index("## Health and metrics")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end != -1 else None]
    return {m.group(1): m.group(2) for line in section.splitlines() if (m := ROW.match(line))}


def _exposed_name(fam) -> str:
    # The name a query uses: prometheus_client keeps a counter's/info's family name without its suffix.
    return {"counter": f"{fam.name}_total", "info": f"{fam.name}_info"}.get(fam.type, fam.name)


def test_readme_table_matches_registered_metrics(tmp_path):
    targets = [exporter.Target("demo", "http://127.0.0.1:9", 9, "none", "demo")]
    registry, _ = exporter.build(targets, state_root=tmp_path)
    registered = {_exposed_name(f): f.type for f in registry.collect()}
    documented = _readme_metrics()
    assert documented, "no metric table in the README's 'Health and metrics' section"
    assert set(documented) == set(registered), (
        f"only in README: {sorted(set(documented) - set(registered))}; "
        f"only in the exporter: {sorted(set(registered) - set(documented))}")
    assert documented == registered, "README types differ from the exporter's"


def test_readme_documents_every_probe_and_exporter_flag():
    import typer
    from typer.main import get_command

    from radiance.healthchecks import cli

    app = typer.Typer()
    app.callback()(lambda: None)
    cli.register(app)
    root = get_command(app)
    section = README.read_text().split("## Health and metrics", 1)[1].split("\n## ", 1)[0]
    commands = {"probe live": root.commands["probe"].commands["live"],
                "probe ready": root.commands["probe"].commands["ready"],
                "exporter": root.commands["exporter"]}
    for name, cmd in commands.items():
        assert f"radiance {name}" in section, name
        for param in cmd.params:
            for flag in param.opts:
                if flag.startswith("--") and flag != "--help":
                    assert flag in section, f"`radiance {name} {flag}` is not in the README's Health and metrics section"
