"""Round-trips and every validation error of the paroquant and pq2 formats."""

from __future__ import annotations

import pytest
import torch

from radiance.kernels.formats import FormatError
from radiance.kernels.formats import paroquant as P
from radiance.kernels.formats import pq2 as T


def _paro(k=256, n=64, krot=3, seed=0) -> P.ParoTensors:
    g = torch.Generator().manual_seed(seed)
    pairs = torch.stack([torch.cat([torch.randperm(128, generator=g) for _ in range(k // 128)]) for _ in range(krot)])
    return P.ParoTensors(
        qweight=P.pack_awq(torch.randint(0, 16, (k, n), generator=g)),
        qzeros=P.pack_awq(torch.randint(0, 16, (k // 128, n), generator=g)),
        scales=torch.rand(k // 128, n, generator=g).half(),
        pairs=pairs.short(),
        theta=torch.randn(krot, k // 2, generator=g).half(),
        channel_scales=torch.rand(1, k, generator=g).half() + 0.5,
    )


def test_awq_roundtrip_and_nibble_order():
    codes = torch.randint(0, 16, (256, 128))
    assert torch.equal(P.unpack_awq(P.pack_awq(codes)).long(), codes)
    # column c of a block of 8 sits in nibble AWQ_INV[c]: column 1 -> bits 16..19
    one = torch.zeros(1, 8, dtype=torch.long)
    one[0, 1] = 0xF
    assert int(P.pack_awq(one)[0, 0]) == 0xF << 16
    # the high nibble wraps into a negative int32, as AWQ checkpoints store it
    top = torch.zeros(1, 8, dtype=torch.long)
    top[0, 7] = 0xF
    assert int(P.pack_awq(top)[0, 0]) == -(1 << 28)


def test_awq_pack_rejects_bad_codes():
    with pytest.raises(FormatError, match="0..15"):
        P.pack_awq(torch.full((1, 8), 16))
    with pytest.raises(FormatError, match="multiple of 8"):
        P.pack_awq(torch.zeros(1, 7, dtype=torch.long))


def test_ternary_roundtrip_and_bit_positions():
    codes = torch.randint(0, 3, (16, 512))
    assert torch.equal(T.unpack_ternary(T.pack_ternary(codes)).long(), codes)
    c = torch.zeros(1, 4, dtype=torch.long)
    c[0, 3] = 2  # element 3 -> bits 6..7
    assert int(T.pack_ternary(c)[0, 0]) == 2 << 6
    with pytest.raises(FormatError, match="0..2"):
        T.pack_ternary(torch.full((1, 4), 3))


def test_paro_state_roundtrip_and_valid():
    t = _paro()
    P.validate(t, "layer.q_proj")
    back = P.ParoTensors.from_state(t.to_state("m.q"), "m.q")
    assert all(torch.equal(getattr(t, n), getattr(back, n)) for n in P.TENSORS)
    assert (t.in_features, t.out_features, t.krot) == (256, 64, 3)
    with pytest.raises(FormatError, match=r"m.q: missing paroquant tensors \['m.q.theta'\]"):
        P.ParoTensors.from_state({k: v for k, v in t.to_state("m.q").items() if "theta" not in k}, "m.q")


def _bad(**changes):
    t = _paro()
    for k, v in changes.items():
        setattr(t, k, v(t))
    return t


@pytest.mark.parametrize(
    "changes, kw, match",
    [
        ({}, {"bits": 8}, "L: paroquant bits must be 4, got 8"),
        ({}, {"group_size": 64}, "L: paroquant group_size must be 128, got 64"),
        ({"qweight": lambda t: t.qweight[:200]}, {}, r"L.qweight: in_features K=200 is not a multiple"),
        ({"pairs": lambda t: t.pairs.repeat(3, 1)}, {}, "L.pairs: krot=9 must be between 1 and 8"),
        ({"qweight": lambda t: t.qweight.float()}, {}, "L.qweight: expected shape"),
        ({"qzeros": lambda t: t.qzeros[:1]}, {}, "L.qzeros: expected shape"),
        ({"scales": lambda t: t.scales.float()}, {}, "L.scales: expected shape"),
        ({"pairs": lambda t: t.pairs.int()}, {}, "L.pairs: expected shape"),
        ({"theta": lambda t: t.theta[:, :64]}, {}, "L.theta: expected shape"),
        ({"channel_scales": lambda t: t.channel_scales.view(-1)}, {}, "L.channel_scales: expected shape"),
        ({"scales": lambda t: t.scales.view(-1)}, {}, r"L.scales: expected 2-D"),
        ({"scales": lambda t: torch.full_like(t.scales, float("inf"))}, {}, "L.scales: holds non-finite"),
    ],
)
def test_paro_validation_errors(changes, kw, match):
    with pytest.raises(FormatError, match=match):
        P.validate(_bad(**changes), "L", **kw)


def test_paro_pairs_must_partition_each_group():
    t = _paro()
    t.pairs[1, 130] = t.pairs[1, 131]  # duplicate inside group 1 of layer 1
    with pytest.raises(FormatError, match=r"L.pairs: rotation layer 1, group 1 is not a permutation"):
        P.validate(t, "L")
    t = _paro()
    t.pairs[0, 5] = 128 + int(t.pairs[0, 5])  # index leaves its group
    with pytest.raises(FormatError, match=r"rotation layer 0, group 0"):
        P.validate(t, "L")


def test_pq2_validation_errors():
    good = T.Pq2Tensors(T.pack_ternary(torch.randint(0, 3, (8, 256))), torch.rand(8, 2).half())
    T.validate(good, "L")
    assert (good.in_features, good.out_features) == (256, 8)
    with pytest.raises(FormatError, match="L: pq2 bits must be 2, got 4"):
        T.validate(good, "L", bits=4)
    with pytest.raises(FormatError, match="L: pq2 group_size must be 128"):
        T.validate(good, "L", group_size=32)
    with pytest.raises(FormatError, match="L.qweight: expected 2-D"):
        T.validate(T.Pq2Tensors(good.qweight.int(), good.scales), "L")
    with pytest.raises(FormatError, match="K=160 is not a multiple"):
        T.validate(T.Pq2Tensors(good.qweight[:, :40], good.scales), "L")
    with pytest.raises(FormatError, match=r"L.scales: expected shape \[8, 2\]"):
        T.validate(T.Pq2Tensors(good.qweight, good.scales.float()), "L")
    with pytest.raises(FormatError, match="L.scales: holds non-finite"):
        T.validate(T.Pq2Tensors(good.qweight, torch.full_like(good.scales, float("nan"))), "L")
    q = good.qweight.clone()
    q[3, 7] = 0b00110000  # element 2 of that byte is code 3
    with pytest.raises(FormatError, match="invalid ternary code 3 in row 3, byte 7"):
        T.validate(T.Pq2Tensors(q, good.scales), "L")
    with pytest.raises(FormatError, match=r"missing pq2 tensors \['p.scales'\]"):
        T.Pq2Tensors.from_state({"p.qweight": q}, "p")
