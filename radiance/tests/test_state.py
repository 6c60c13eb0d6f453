"""State records: atomic JSON files with the exact fields the exporter reads."""

from __future__ import annotations

import json

import pytest

from radiance import state

LAUNCH = dict(mode="prod", phases={"kernel_build": 1.5, "template": 0.01, "cache_key": 0.2},
              kernel_builds=2, kernel_cache_hits=5, cache_key="abc123-spec7", radiance_version="0.1.0",
              vllm_version="0.32.0", model="demo")


def test_launch_round_trip(tmp_path):
    p = state.record_launch("demo", **LAUNCH, exec_at=100.0, root=tmp_path)
    assert p == tmp_path / "launch" / "demo.json"
    rec = state.read_state("launch", "demo", root=tmp_path)
    assert rec["phases"]["kernel_build"] == 1.5 and rec["written_at"] > 0
    good, bad = state.read_records("launch", root=tmp_path)
    assert bad == {} and good["demo"].cache_key == "abc123-spec7"
    assert not list((tmp_path / "launch").glob(".*.tmp")), "no temp file stays behind"


def test_switches_are_one_file_each_in_time_order(tmp_path):
    state.record_switch(None, "demo", "ok", 40.0, at=1000.0, root=tmp_path)
    state.record_switch("demo", "paro", "rolled_back", 300.0, at=2000.0, root=tmp_path)
    state.record_switch("demo", "paro", "refused", 0.1, at=3000.5, root=tmp_path)
    good, bad = state.read_records("switch", root=tmp_path)
    assert bad == {}
    assert [r.outcome for r in good.values()] == ["ok", "rolled_back", "refused"]
    raw = state.read_state("switch", state.switch_name(2000.0, "paro"), root=tmp_path)
    assert raw["from"] == "demo" and raw["to"] == "paro"


def test_write_state_refuses_off_schema_records(tmp_path):
    with pytest.raises(state.StateError, match=r"outcome: Input should be 'ok', 'timeout'"):
        state.record_switch("a", "b", "crashed", 1.0, root=tmp_path)
    with pytest.raises(state.StateError, match=r"write_state\('launch', 'demo'\).*kernel_builds: Field required"):
        state.write_state("launch", "demo", {k: v for k, v in LAUNCH.items() if k != "kernel_builds"} | {"stack": "demo"},
                          root=tmp_path)
    with pytest.raises(state.StateError, match="argv: Extra inputs are not permitted"):
        state.write_state("launch", "demo", LAUNCH | {"stack": "demo", "argv": []}, root=tmp_path)
    assert not (tmp_path / "launch").exists() and not (tmp_path / "switch").exists(), "nothing written"


def test_unknown_kinds_are_free_form(tmp_path):
    state.write_state("notes", "x", {"anything": [1, 2]}, root=tmp_path)
    assert state.read_all("notes", root=tmp_path)["x"]["anything"] == [1, 2]


def test_read_records_reports_bad_files_without_failing(tmp_path):
    state.record_ready("demo", waited_s=3.0, at=50.0, root=tmp_path)
    (tmp_path / "ready" / "broken.json").write_text("{not json")
    (tmp_path / "ready" / "old.json").write_text(json.dumps({"stack": "old"}))
    good, bad = state.read_records("ready", root=tmp_path)
    assert list(good) == ["demo"] and good["demo"].waited_s == 3.0
    assert set(bad) == {str(tmp_path / "ready" / "broken.json"), str(tmp_path / "ready" / "old.json")}


def test_names_must_be_plain_file_names(tmp_path):
    with pytest.raises(state.StateError, match="plain file name"):
        state.write_state("notes", "../escape", {}, root=tmp_path)


def test_read_records_cache_reparses_only_changed_files(tmp_path):
    cache: dict = {}
    state.record_launch("demo", **LAUNCH, root=tmp_path)
    first, _ = state.read_records("launch", root=tmp_path, cache=cache)
    again, _ = state.read_records("launch", root=tmp_path, cache=cache)
    assert again["demo"] is first["demo"], "unchanged file served from the cache"
    state.record_launch("demo", **(LAUNCH | {"kernel_builds": 9}), root=tmp_path)
    changed, _ = state.read_records("launch", root=tmp_path, cache=cache)
    assert changed["demo"].kernel_builds == 9
