# SPDX-License-Identifier: Apache-2.0
"""FBGEMM interop: exports read by fbgemm_gpu's IntNBitTableBatchedEmbeddingBagsCodegen (CPU),
and tables quantized by FBGEMM's own operators imported into the module.

Tolerances and why:
  * TBE pooled outputs vs the module's, on the same bytes: both decode x = scale * q + bias
    from the same f16/f32 parameters and sum the bag in index order, but FBGEMM's kernel fuses
    the multiply-add (one rounding) where mpe rounds twice (contraction off), so each term
    may differ by one rounding and the partial sums propagate it. Bound per element:
    2^-22 * L * sum_i (|scale_i q_i| + |bias_i|) (= 2 * L * 2^-23 * the terms' magnitudes).
  * the INT8 export to the TBE layout re-quantizes mpe's f32 scale/bias to f16 (the TBE's
    format): each exported value is within half the new f16 scale of mpe's, plus rounding,
    so the TBE's output is compared to the module's within 0.5 * sum_i scale16_i + the bound
    above. With a cache the module reads its cached rows in FP32, which the export (the store,
    after a flush) holds rounded: there the TBE is compared with a module that imported the
    exported bytes.
  * mean pooling: both multiply or divide the sum by L, one rounding each: the bound above
    divided by L, plus 2^-22 of the value.
  * FBGEMM-quantized rows imported into the module: the bytes move exactly (export gives the
    same bytes back, compared with torch.equal); get_weights vs FBGEMM's own dequantizer
    differ by at most the fused multiply-add's one rounding: 2^-23 * (|scale q| + |bias|).
"""
import pytest
import torch

import mpe_torch
from conftest import make_csr

fbgemm_gpu = pytest.importorskip("fbgemm_gpu")
from fbgemm_gpu.split_embedding_configs import SparseType  # noqa: E402
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode  # noqa: E402
from fbgemm_gpu.split_table_batched_embeddings_ops_inference import (  # noqa: E402
    IntNBitTableBatchedEmbeddingBagsCodegen,
)


def tbe_from_bytes(specs, sparse_type, tables_bytes, pooling="sum"):
    tbe = IntNBitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(f"t{t}", rows, D, sparse_type, EmbeddingLocation.HOST) for t, (rows, D) in enumerate(specs)],
        device="cpu", output_dtype=SparseType.FP32,
        pooling_mode=PoolingMode.SUM if pooling == "sum" else PoolingMode.MEAN)
    tbe.fill_random_weights()
    assert tbe.row_alignment == 1
    for (w, _), b in zip(tbe.split_embedding_weights(split_scale_shifts=False), tables_bytes):
        assert w.shape == b.shape, (w.shape, b.shape)
        w.copy_(b)
    return tbe


def decode_tbe_rows(b, D, bits):
    """(rows, 4 + codes) TBE rows -> (scale, bias, codes as float) per row, f16 parameters first."""
    scale = b[:, 0:2].contiguous().view(torch.float16).float()
    bias = b[:, 2:4].contiguous().view(torch.float16).float()
    codes = b[:, 4:]
    if bits == 8:
        q = codes[:, :D].float()
    elif bits == 4:  # element 2i: low nibble of byte i
        q = torch.stack([codes & 0xF, codes >> 4], dim=2).reshape(b.shape[0], -1)[:, :D].float()
    else:  # 2 bits: element 4i + k in bits 2k..2k+1 of byte i
        q = torch.stack([(codes >> (2 * k)) & 0x3 for k in range(4)], dim=2).reshape(b.shape[0], -1)[:, :D].float()
    return scale, bias, q


def arithmetic_bound(idx, off, B, t, b, scale, bias, q):
    lo, hi = int(off[t * B + b]), int(off[t * B + b + 1])
    rows = idx[lo:hi]
    mag = ((scale[rows] * q[rows]).abs() + bias[rows].abs()).sum(0)
    return 2.0 ** -22 * (hi - lo) * mag, rows


@pytest.mark.parametrize("storage,bits,sparse", [("int8", 8, SparseType.INT8), ("int4", 4, SparseType.INT4),
                                                 ("int2", 2, SparseType.INT2)])
@pytest.mark.parametrize("pooling", ["sum", "mean"])
@pytest.mark.parametrize("cache", ["none", "lru"])
def test_tbe_inference_reads_export(storage, bits, sparse, pooling, cache):
    specs = [(60, 16), (9, 16), (200, 16)]
    m = mpe_torch.TableBatchedEmbeddingBags(specs, storage=storage, cache=cache,
                                            cache_fraction=0.2 if cache == "lru" else 0.0,
                                            rounding="stochastic", optimizer="rowwise_adagrad",
                                            learning_rate=0.1, pooling_mode=pooling, seed=5)
    m.init_uniform(-0.5, 0.5)
    B = 24
    # a few training steps (with a cache, the export writes the dirty cached rows back first)
    for s in range(3):
        idx, off = make_csr([r for r, _ in specs], B, 5, seed=100 + s)
        m(idx, off).backward(torch.randn(B, 48, generator=torch.Generator().manual_seed(s)))
    exported = [m.export_table(t, layout="tbe_inference", alignment=1) for t in range(len(specs))]
    tbe = tbe_from_bytes(specs, sparse, exported, pooling)
    idx, off = make_csr([r for r, _ in specs], B, 7, seed=3)
    got = tbe(idx.int(), off.int())
    assert got.shape == (B, 48) and got.dtype == torch.float32

    def check(mine, requantized):
        for t, (rows, D) in enumerate(specs):
            scale, bias, q = decode_tbe_rows(exported[t], D, bits)
            for b in range(B):
                tol, rws = arithmetic_bound(idx, off, B, t, b, scale, bias, q)
                L = max(rws.numel(), 1)
                if requantized:  # f16 scale/bias: half a step per term
                    tol = tol + 0.5 * scale[rws].sum(0) * (1 + 2.0 ** -20)
                if pooling == "mean":  # both scale the sum by 1/L: one more rounding each
                    tol = tol / L + 2.0 ** -22 * mine[b, t * D:(t + 1) * D].abs()
                diff = (got[b, t * D:(t + 1) * D] - mine[b, t * D:(t + 1) * D]).abs()
                assert torch.all(diff <= tol), (t, b, diff.max(), tol.min())

    if cache == "none":  # the module reads its store, which the export holds
        m.eval()
        check(m(idx, off), requantized=bits == 8)
    # the same bytes imported into a module: only the arithmetic bound remains (INT8 from the
    # TBE's f16 parameters is exact in mpe's f32 ones)
    m2 = mpe_torch.TableBatchedEmbeddingBags(specs, storage=storage, pooling_mode=pooling)
    for t in range(len(specs)):
        assert m2.import_table(t, exported[t], layout="tbe_inference", alignment=1) == 0
    m2.eval()
    check(m2(idx, off), requantized=False)
    if bits == 4:  # a byte move both ways
        for t in range(len(specs)):
            assert torch.equal(m2.export_table(t, layout="tbe_inference", alignment=1), exported[t])


def test_int8_fbgemm_quantized_import():
    g = torch.Generator().manual_seed(1)
    specs = [(50, 24), (13, 24)]
    m = mpe_torch.TableBatchedEmbeddingBags(specs, storage="int8", cache="lru", cache_fraction=0.5)
    for t, (rows, D) in enumerate(specs):
        w = torch.randn(rows, D, generator=g) * 3
        q = torch.ops.fbgemm.FloatToFused8BitRowwiseQuantized(w)
        assert q.shape == (rows, D + 8) and q.dtype == torch.uint8
        assert m.import_table(t, q) == 0
        assert torch.equal(m.export_table(t), q)  # exact byte move both ways
        ref = torch.ops.fbgemm.Fused8BitRowwiseQuantizedToFloat(q)
        got = m.get_weights(t)
        scale = q[:, D:D + 4].contiguous().view(torch.float32)
        bias = q[:, D + 4:D + 8].contiguous().view(torch.float32)
        tol = 2.0 ** -23 * ((scale * q[:, :D].float()).abs() + bias.abs())
        assert torch.all((got - ref).abs() <= tol)


def test_int4_fbgemm_quantized_import():
    g = torch.Generator().manual_seed(2)
    specs = [(50, 32), (13, 32)]
    m = mpe_torch.TableBatchedEmbeddingBags(specs, storage="int4", rounding="nearest")
    for t, (rows, D) in enumerate(specs):
        w = torch.randn(rows, D, generator=g)
        q = torch.ops.fbgemm.FloatToFusedNBitRowwiseQuantizedSBHalf(w, 4)
        assert q.shape == (rows, D // 2 + 4)
        assert m.import_table(t, q) == 0
        assert torch.equal(m.export_table(t), q)
        ref = torch.ops.fbgemm.FusedNBitRowwiseQuantizedSBHalfToFloat(q, 4)
        got = m.get_weights(t)
        scale = q[:, D // 2:D // 2 + 2].contiguous().view(torch.float16).float()
        bias = q[:, D // 2 + 2:].contiguous().view(torch.float16).float()
        codes = torch.stack([q[:, :D // 2] & 0xF, q[:, :D // 2] >> 4], dim=2).reshape(rows, D).float()
        tol = 2.0 ** -23 * ((scale * codes).abs() + bias.abs())
        assert torch.all((got - ref).abs() <= tol)


def test_fp32_export_matches_weights():
    specs = [(10, 5)]
    m = mpe_torch.TableBatchedEmbeddingBags(specs)
    w = torch.randn(10, 5)
    m.set_weights(0, w)
    e = m.export_table(0)
    assert e.shape == (10, 20) and torch.equal(e.view(torch.float32), w)
    e8 = m.export_table(0, format="int8")
    assert e8.shape == (10, 13)
    back = torch.ops.fbgemm.Fused8BitRowwiseQuantizedToFloat(e8)
    scale = e8[:, 5:9].contiguous().view(torch.float32)
    assert torch.all((back - w).abs() <= 0.5 * scale * (1 + 2.0 ** -10) + 2.0 ** -22 * w.abs())


def test_rowwise_adagrad_matches_fbgemm_training_tbe():
    """Fp32 store, no cache, rowwise_adagrad against fbgemm_gpu's CPU
    SplitTableBatchedEmbeddingBagsCodegen with EXACT_ROWWISE_ADAGRAD, three steps.

    Tolerance: both compute G += mean_d(g_d^2) and w -= lr / (sqrt(G) + eps) * g, but FBGEMM
    sums the squares in its own order with fused multiply-adds, so G may differ by about
    D * 2^-24 relative (D = 8 here), the update u by half that plus the few roundings of
    sqrt, add, div and mul: |u_mpe - u_fbgemm| <= 2^-18 |u| per step (about 16 * 2^-24, over
    the 8 * 2^-24 + 4 * 2^-24 derived), and each subtraction from w adds an ulp: 2^-22 |w|.
    Summed over the three steps. Measured: at most one ulp of w (1.2e-7 at |w| ~ 1)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (ComputeDevice,
                                                                        SplitTableBatchedEmbeddingBagsCodegen)
    specs = [(40, 8), (25, 8)]
    lr = 0.1
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(r, d, EmbeddingLocation.HOST, ComputeDevice.CPU) for r, d in specs],
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=lr, eps=1e-8, pooling_mode=PoolingMode.SUM)
    m = mpe_torch.TableBatchedEmbeddingBags(specs, optimizer="rowwise_adagrad", learning_rate=lr, eps=1e-8)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for t, w in enumerate(tbe.split_embedding_weights()):
            init = torch.randn(w.shape, generator=g)
            w.copy_(init)
            m.set_weights(t, init)
    B = 8
    bound = [torch.zeros(r, d) for r, d in specs]
    for step in range(3):
        idx, off = make_csr([r for r, _ in specs], B, 4, seed=50 + step)
        grad = torch.randn(B, 16, generator=g)
        out_f = tbe(idx, off)
        out_m = m(idx, off)
        # pooled outputs: the same summation order (bit for bit at step 0), so they differ by the
        # weights' accumulated bound summed over the bag, plus the sum's propagation of it
        for t, (rows, D) in enumerate(specs):
            w_m = m.get_weights(t)
            for b in range(B):
                lo, hi = int(off[t * B + b]), int(off[t * B + b + 1])
                r = idx[lo:hi]
                tol = bound[t][r].sum(0) * (1 + 2.0 ** -20) + 2.0 ** -22 * (hi - lo) * w_m[r].abs().sum(0)
                d = (out_f[b, t * D:(t + 1) * D] - out_m[b, t * D:(t + 1) * D]).abs()
                assert torch.all(d <= tol) if step else torch.equal(out_f, out_m)
        before = [m.get_weights(t) for t in range(2)]
        out_f.backward(grad)
        out_m.backward(grad)
        for t in range(2):
            u = (m.get_weights(t) - before[t]).abs()
            bound[t] += 2.0 ** -18 * u + 2.0 ** -22 * before[t].abs()
    for t, w in enumerate(tbe.split_embedding_weights()):
        diff = (w - m.get_weights(t)).abs()
        assert torch.all(diff <= bound[t] + 1e-30), (t, diff.max())
