"""bench/wgmma_hazard.scan on hand-written SASS in nvdisasm's layout: it must flag the race found in
paroquant's wgmma kernel (the next loop step rewriting the A registers of the wgmma group left in flight) and
pass the fixed pattern (those registers rewritten only after the wait that retires them)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from wgmma_hazard import scan  # noqa: E402


def _sass(body: list[str]) -> str:
    lines = []
    for i, inst in enumerate(body):
        if inst.endswith(":"):
            lines.append(inst)
        else:
            lines.append(f"        /*{16 * i:04x}*/                   {inst} ;")
    return "\n".join(lines)


LOOP_TOP = [".L_x_1:", "SHF.R.U32.HI R152, RZ, 0xc, R212", "LOP3.LUT R153, R152, 0xf000f, RZ, 0xc0, !PT",
            "WARPGROUP.ARRIVE", "HGMMA.64x256x16.F32 R24, R152, gdesc[UR4], R24, gsb0"]


def test_flags_a_registers_rewritten_while_the_group_is_in_flight():
    racy = LOOP_TOP + ["WARPGROUP.DEPBAR.LE gsb0, 0x1", "@P3 BRA `(.L_x_1)", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "EXIT"]
    found = scan(_sass(racy))
    assert found and "R152" in found[0] and "SHF" in found[0]  # the second pass's loop top


def test_passes_when_the_wait_retires_the_group_first():
    safe = LOOP_TOP + ["WARPGROUP.DEPBAR.LE gsb0, 0x0", "@P3 BRA `(.L_x_1)", "EXIT"]
    assert scan(_sass(safe)) == []


def test_a_write_between_issue_and_wait_inside_one_step_is_flagged():
    inside = LOOP_TOP + ["IMAD.WIDE.U32 R154, R2, 0x4, R6", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "@P3 BRA `(.L_x_1)"]
    found = scan(_sass(inside))
    assert found and "R154" in found[0]  # the 64-bit IMAD.WIDE writes R154 and R155
