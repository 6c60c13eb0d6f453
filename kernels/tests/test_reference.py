"""The reference numerics: the rotation identity (the Givens layers as one dense matrix) in float64,
pq2's integer form, the activation quantizers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from radiance.kernels import reference as R
from radiance.kernels.formats import paroquant as P
from radiance.kernels.formats import pq2 as T
from radiance.quantize import rtn


def _dense_rotation(pairs: np.ndarray, theta: np.ndarray, cs: np.ndarray) -> np.ndarray:
    """M with rotate(x) = x @ M, built element by element from the written convention."""
    krot, k = pairs.shape
    m = np.diag(cs.astype(np.float64))
    for r in range(krot):
        g_r = np.eye(k)
        for g in range(k // 128):
            for p in range(64):
                i = g * 128 + int(pairs[r, g * 128 + 2 * p])
                j = g * 128 + int(pairs[r, g * 128 + 2 * p + 1])
                c, s = math.cos(float(theta[r, g * 64 + p])), math.sin(float(theta[r, g * 64 + p]))
                # x_i' = c x_i + s x_j ; x_j' = c x_j - s x_i  (row vector times g_r)
                g_r[i, i], g_r[j, i], g_r[j, j], g_r[i, j] = c, s, c, -s
        m = m @ g_r
    return m


@pytest.mark.parametrize("seed, n, k, krot", [(0, 64, 256, 8), (1, 40, 384, 3), (2, 16, 128, 1)])
def test_rotated_form_equals_direct_dequant_float64(seed, n, k, krot):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen, dtype=torch.float64)
    pairs, theta = rtn.random_rotation(k, krot, gen)
    cs = (torch.rand(1, k, generator=gen) + 0.5).half()
    t = rtn.paroquant_linear_tensors(w, pairs, theta, cs)
    P.validate(t, "rand")
    x = torch.randn(5, k, generator=gen, dtype=torch.float64)

    y_rot = R.paroquant_linear(x, t)  # ((x * cs) R^T) dequant(Q)^T
    m = _dense_rotation(pairs.numpy(), theta.float().numpy(), cs.float().numpy()[0])
    w_dq = R.dequant_paroquant(t.qweight, t.qzeros, t.scales, dtype=torch.float64).numpy()
    y_direct = x.numpy() @ (w_dq @ m.T).T  # x . W_dequant^T with W_dequant = dequant(Q) M^T
    rel = np.linalg.norm(y_rot.numpy() - y_direct) / np.linalg.norm(y_direct)
    assert rel <= 1e-12, rel
    # and the quantized layer approximates the dense one (int4 RTN error, not a rotation bug)
    y_w = (x @ w.t()).numpy()
    assert np.linalg.norm(y_rot.numpy() - y_w) / np.linalg.norm(y_w) < 0.25


def test_rotation_is_orthogonal_and_inverse_flips_layers():
    gen = torch.Generator().manual_seed(3)
    pairs, theta = rtn.random_rotation(256, 8, gen)
    x = torch.randn(4, 256, dtype=torch.float64, generator=gen)
    y = R.rotate(x, pairs, theta)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), rtol=1e-13)
    back = R.rotate(y, pairs.flip(0), -theta.flip(0))
    assert torch.allclose(back, x, atol=1e-12)


def test_identity_rotation_is_exact_noop():
    pairs, theta = rtn.identity_rotation(256, 8)
    x = torch.randn(3, 256)
    assert torch.equal(R.rotate(x, pairs, theta), x)


def test_dtypes_float32_float64_bf16():
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(32, 256, generator=gen)
    pairs, theta = rtn.random_rotation(256, 4, gen)
    t = rtn.paroquant_linear_tensors(w, pairs, theta)
    x = torch.randn(2, 256, generator=gen)
    y64 = R.paroquant_linear(x.double(), t)
    y32 = R.paroquant_linear(x, t)
    assert y32.dtype == torch.float32 and y64.dtype == torch.float64
    assert torch.allclose(y32.double(), y64, rtol=1e-5, atol=1e-5)
    ybf = R.paroquant_linear(x.bfloat16(), t, bias=torch.ones(32))
    assert ybf.dtype == torch.bfloat16
    assert torch.allclose(ybf.float(), y32 + 1, rtol=0.05, atol=0.05)


def test_pq2_integer_form_equals_fake_quant_dense():
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(48, 384, generator=gen, dtype=torch.float64)
    t = rtn.pq2_linear_tensors(w)
    T.validate(t, "rand")
    x = torch.randn(7, 384, generator=gen, dtype=torch.float64)
    y = R.pq2_linear(x, t, act_quant=True)
    # same thing computed as dequantized activations times dequantized weights
    q, a = R.quant_int8_group(x)
    xq = R.dequant_group(q, a, torch.float64)
    y_dense = xq @ R.dequant_pq2(t.qweight, t.scales, dtype=torch.float64).t()
    assert torch.allclose(y, y_dense, rtol=1e-12, atol=1e-12)
    y_noq = R.pq2_linear(x, t, act_quant=False)
    assert (y - y_noq).norm() / y_noq.norm() < 0.02  # int8 activation error only
    assert R.pq2_linear(x.float(), t, chunk_rows=2).shape == (7, 48)


def test_pq2_dequant_values():
    codes = torch.tensor([[0, 1, 2, 1] * 32])
    t = T.Pq2Tensors(T.pack_ternary(codes), torch.tensor([[2.0]]).half())
    assert R.dequant_pq2(t.qweight, t.scales)[0, :4].tolist() == [-2.0, 0.0, 2.0, 0.0]


def test_paroquant_dequant_is_q_minus_z_times_s():
    codes = torch.zeros(128, 8, dtype=torch.long)
    codes[:, 3] = 11
    zeros = torch.full((1, 8), 8)
    scales = torch.full((1, 8), 0.5).half()
    w = R.dequant_paroquant(P.pack_awq(codes), P.pack_awq(zeros), scales)
    assert w.shape == (8, 128)
    assert w[3].eq(1.5).all() and w[0].eq(-4.0).all()


def test_activation_quantizers():
    x = torch.randn(3, 256) * torch.linspace(0.1, 10, 256)
    x[1, :128] = 0  # an all-zero group quantizes to zeros with scale 0
    q, a = R.quant_int8_group(x)
    assert q.dtype == torch.int8 and a.shape == (3, 2) and a[1, 0] == 0 and q[1, :128].eq(0).all()
    assert int(q.abs().max()) == 127
    assert (R.dequant_group(q, a) - x).abs().max() <= a.max() / 2 + 1e-6
    qf, af = R.quant_fp8_e4m3_group(x)
    assert qf.dtype == torch.float8_e4m3fn and float(qf.float().abs().max()) == 448.0
    assert (R.dequant_group(qf, af) - x).norm() / x.norm() < 0.05
    qt, at = R.quant_fp8_e4m3_token(x)
    assert at.shape == (3, 1)
    assert (qt.float() * at - x).norm() / x.norm() < 0.05
    assert torch.equal(R.fake_quant(x, None), x)
    with pytest.raises(ValueError, match="unknown activation quantizer 'int4'"):
        R.fake_quant(x, "int4")


@pytest.mark.gpu
def test_reference_on_cuda_matches_cpu():
    gen = torch.Generator().manual_seed(6)
    w = torch.randn(64, 256, generator=gen)
    pairs, theta = rtn.random_rotation(256, 8, gen)
    t = rtn.paroquant_linear_tensors(w, pairs, theta)
    x = torch.randn(4, 256, generator=gen)
    tc = P.ParoTensors(**{n: getattr(t, n).cuda() for n in P.TENSORS})
    assert torch.allclose(R.paroquant_linear(x.cuda(), tc).cpu(), R.paroquant_linear(x, t), rtol=1e-4, atol=1e-4)
