# SPDX-License-Identifier: Apache-2.0
"""Every storage format, cache policy, rounding, state precision and optimizer of mpe reachable
by name, each against an independent reference.

References and tolerances (and why):
  * names -> types: each built combination builds the mpe type it names (``groups()`` reports
    mpe's own names of the instantiated types), so the dispatch cannot map a name to another
    variant unnoticed.
  * quantization, round to nearest, checked bit for bit against torch's own conversions:
    bf16 = ``w.to(torch.bfloat16)`` (both round to nearest even); FP8 row-wise (mpe's
    ``Fp8Rowwise``: scale = amax / F::max, codes = FP8(x / scale), read back as scale * code,
    each an f32 operation correctly rounded) = the same three steps with torch's
    ``float8_e4m3fn`` / ``float8_e5m2`` conversion (round to nearest even) for the codes. The
    f32 divisions and the product are computed in float64 and rounded once to float32, which
    is the correctly rounded f32 result (53 >= 2 * 24 + 2 bits: the double rounding is
    innocuous for + - * /).
  * forward: bit for bit against ``nn.EmbeddingBag`` over the store's dequantized weights
    (``get_weights``): both sum a bag's rows in index order starting from the first (as in
    test_reference.py).
  * one SGD step, round to nearest, no cache: bit for bit against ``Q(w - lr * g)`` computed in
    torch, Q the store's quantization above. The batch uses each row at most once (so the
    row's gradient is one output-gradient slice, no summation order to match) and lr = 2^-4
    (so lr * g is exact and only the subtraction rounds, in both).
  * stochastic rounding of that step (bf16): each element is one of the two bf16 neighbours of
    the f32 value, i.e. |got - w| < one bf16 ulp of w and got is a bf16 value (the random bits
    are mpe's Philox stream, not reproduced here); and not every element is the nearest one.
  * cache policies on FP32 storage (FP32 state): bit for bit equal to no cache, every
    optimizer. mpe promises it (docs/testing.md, test_embedding_fp32: "Fp32 storage with any
    cache size and policy equals a plain FP32 embedding bag bit for bit"): a cached row trains
    in FP32 exactly as the store's FP32 row would. The cache must have hit and evicted rows,
    so the comparison is not vacuous.
  * state precisions: memory().optimizer_bytes is rows x state values x 4 (fp32) or x 2
    (bf16, fp16) (state_precision.hpp's table). The first Adam/Adagrad step equals the FP32
    state's bit for bit (the step computes the new state in FP32 and updates the weight from
    it before the state is rounded for storage); later steps differ (the rounded state is read
    back). Resume through state_dict: test_state.py.
"""
import pytest
import torch

import mpe_torch

# mpe's name of each storage format (the Python names drop "_rowwise").
MPE_STORAGE = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16", "int8": "int8_rowwise", "int4": "int4_rowwise",
               "int2": "int2_rowwise", "fp8_e4m3": "fp8_e4m3_rowwise", "fp8_e5m2": "fp8_e5m2_rowwise"}
FP8 = {"fp8_e4m3": (torch.float8_e4m3fn, 448.0), "fp8_e5m2": (torch.float8_e5m2, 57344.0)}


def test_lists_name_every_variant():
    assert mpe_torch.STORAGES == ("fp32", "fp16", "bf16", "int8", "int4", "int2", "fp8_e4m3", "fp8_e5m2")
    assert mpe_torch.CACHES == ("none", "lru", "lfu", "direct_mapped", "second_touch_lru", "wtinylfu")
    assert mpe_torch.ROUNDINGS == ("stochastic", "nearest")
    assert mpe_torch.STATE_PRECISIONS == ("fp32", "bf16", "fp16")
    assert mpe_torch.OPTIMIZERS == ("sgd", "rowwise_adagrad", "adagrad", "adam")
    assert mpe_torch.EXPORT_FORMATS == ("fp32", "fp16", "bf16", "int8", "int4", "int2")
    built = [c.split("/") for c in mpe_torch.built_combinations()]
    for axis, names in enumerate((mpe_torch.STORAGES, mpe_torch.CACHES, mpe_torch.ROUNDINGS,
                                  mpe_torch.STATE_PRECISIONS)):
        assert {c[axis] for c in built} == set(names), axis  # every variant is reachable
    # every storage with both roundings (default cache and state)
    for s in mpe_torch.STORAGES:
        for r in mpe_torch.ROUNDINGS:
            assert [s, "lru", r, "fp32"] in built and [s, "none", r, "fp32"] in built


@pytest.mark.parametrize("combo", mpe_torch.built_combinations())
def test_each_name_builds_its_type(combo):
    storage, cache, rounding, state = combo.split("/")
    m = mpe_torch.TableBatchedEmbeddingBags([(64, 4), (30, 4)], storage=storage, cache=cache,
                                            cache_fraction=0.0 if cache == "none" else 0.5, rounding=rounding,
                                            state_precision=state, optimizer="adam", learning_rate=0.01)
    (g,) = m.groups()
    assert g["type"] == f"{MPE_STORAGE[storage]}/{'lru' if cache == 'none' else cache}/{rounding}/{state}"
    assert (g["cache_slots"] > 0) == (cache != "none")
    m.init_uniform(-0.5, 0.5)
    idx = torch.tensor([0, 5, 63, 1, 29, 2], dtype=torch.int64)
    off = torch.tensor([0, 2, 3, 5, 6], dtype=torch.int64)
    m(idx, off).sum().backward()  # one step of every combination runs
    assert m.step == 1 and torch.isfinite(m.get_weights(0)).all()
    assert m.state_dict()["_extra_state"]["config"]["state_precision"] == state
    assert f"state_precision={state!r}" in repr(m)


# ---- storage formats: quantization, forward, SGD ----

def quantize_ref(storage, w):
    """The store's round-to-nearest quantization of each row of `w` (float32), in torch."""
    if storage == "fp32":
        return w.clone()
    if storage == "fp16":
        return w.half().float()
    if storage == "bf16":
        return w.to(torch.bfloat16).float()
    dtype, fmax = FP8[storage]
    amax = w.abs().amax(dim=1, keepdim=True)
    scale = (amax.double() / fmax).float()
    assert (scale > 2.0 ** -126).all()  # normal scales only: no underflow guard to model here
    q = (w.double() / scale.double()).float().to(dtype).float()
    return (scale.double() * q.double()).float()


def distinct_csr(specs, B, seed):
    """Table-major CSR whose bags use each row at most once (bags of 0 to 3 rows)."""
    g = torch.Generator().manual_seed(seed)
    idx, off = [], [0]
    for rows, _ in specs:
        perm = torch.randperm(rows, generator=g).tolist()
        lengths = torch.randint(0, 4, (B,), generator=g).tolist()
        assert sum(lengths) <= rows
        p = 0
        for L in lengths:
            idx += perm[p:p + L]
            p += L
            off.append(len(idx))
    return torch.tensor(idx, dtype=torch.int64), torch.tensor(off, dtype=torch.int64)


def bag_reference(weights, idx, off, B, mode="sum"):
    outs = []
    for t, w in enumerate(weights):
        bag = torch.nn.EmbeddingBag(w.shape[0], w.shape[1], mode=mode, include_last_offset=True)
        with torch.no_grad():
            bag.weight.copy_(w)
        lo = int(off[t * B])
        outs.append(bag(idx[lo:int(off[(t + 1) * B])], off[t * B:(t + 1) * B + 1] - lo))
    return torch.cat(outs, dim=1).detach()


SPECS = [(120, 8), (80, 8)]
NEW_STORAGES = ["bf16", "fp8_e4m3", "fp8_e5m2"]


def module(storage, rounding="nearest", **kw):
    m = mpe_torch.TableBatchedEmbeddingBags(SPECS, storage=storage, rounding=rounding, seed=5, **kw)
    g = torch.Generator().manual_seed(17)
    w = [torch.randn(r, d, generator=g) for r, d in SPECS]
    for t, x in enumerate(w):
        m.set_weights(t, x)
    return m, w


@pytest.mark.parametrize("storage", ["fp32", "fp16"] + NEW_STORAGES)
def test_quantization_matches_torch(storage):
    m, w = module(storage)
    for t, x in enumerate(w):
        got = m.get_weights(t)
        assert torch.equal(got, quantize_ref(storage, x))
        if storage != "fp32":
            assert not torch.equal(got, x)  # it is quantized


@pytest.mark.parametrize("storage", mpe_torch.STORAGES)
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_forward_over_dequantized_weights(storage, mode):
    m, _ = module(storage, pooling_mode=mode)
    B = 16
    idx, off = distinct_csr(SPECS, B, seed=3)
    dq = m.split_embedding_weights()
    out = m(idx, off)
    ref = bag_reference(dq, idx, off, B, "sum")
    if mode == "sum":
        assert torch.equal(out, ref)
    else:  # mpe multiplies the sum by fl(1 / L) (test_reference.py)
        lengths = torch.stack([off[t * B + 1:(t + 1) * B + 1] - off[t * B:(t + 1) * B] for t in range(2)], 1)
        inv = torch.where(lengths > 0, 1.0 / lengths.clamp_min(1).float(), 0.0).repeat_interleave(8, 1)
        assert torch.equal(out, ref * inv)
    m.eval()
    assert torch.equal(m(idx, off), out.detach())


def sgd_target(m, idx, off, B, grad, lr):
    """(w - lr * g) in f32 per table, g the row's gradient (each row used at most once), and the
    mask of touched rows."""
    dq = m.split_embedding_weights()
    res, touched = [], []
    for t, (rows, D) in enumerate(SPECS):
        g = torch.zeros(rows, D)
        hit = torch.zeros(rows, dtype=torch.bool)
        for b in range(B):
            for p in range(int(off[t * B + b]), int(off[t * B + b + 1])):
                r = int(idx[p])
                assert not hit[r]
                g[r] = grad[b, D * t:D * (t + 1)]
                hit[r] = True
        res.append(dq[t] - lr * g)  # lr * g exact (lr = 2^-4): one rounding, the subtraction
        touched.append(hit)
    return dq, res, touched


@pytest.mark.parametrize("storage", ["fp32", "fp16"] + NEW_STORAGES)
def test_sgd_step_nearest(storage):
    lr = 2.0 ** -4
    m, _ = module(storage, optimizer="sgd", learning_rate=lr)
    B = 20
    idx, off = distinct_csr(SPECS, B, seed=8)
    grad = torch.randn(B, 16, generator=torch.Generator().manual_seed(4))
    before, target, touched = sgd_target(m, idx, off, B, grad, lr)
    m(idx, off).backward(grad)
    assert m.step == 1
    for t in range(len(SPECS)):
        got = m.get_weights(t)
        hit = touched[t]
        assert hit.any() and (~hit).any()
        assert torch.equal(got[hit], quantize_ref(storage, target[t])[hit])
        assert torch.equal(got[~hit], before[t][~hit])  # rows not in the batch are untouched


def test_sgd_step_bf16_stochastic():
    lr = 2.0 ** -4
    m, _ = module("bf16", rounding="stochastic", optimizer="sgd", learning_rate=lr)
    B = 20
    idx, off = distinct_csr(SPECS, B, seed=8)
    grad = torch.randn(B, 16, generator=torch.Generator().manual_seed(4))
    _, target, touched = sgd_target(m, idx, off, B, grad, lr)
    m(idx, off).backward(grad)
    not_nearest = 0
    for t in range(len(SPECS)):
        got, w, hit = m.get_weights(t)[touched[t]], target[t][touched[t]], touched[t]
        assert torch.equal(got, got.to(torch.bfloat16).float())  # a bf16 value
        ulp = torch.ldexp(torch.ones_like(w), torch.frexp(w)[1] - 8)  # bf16 spacing at |w| (8 significant bits)
        assert torch.all((got - w).abs() < ulp)  # one of w's two bf16 neighbours
        not_nearest += int((got != w.to(torch.bfloat16).float()).sum())
        assert hit.any()
    assert not_nearest > 0  # stochastic: some elements take the farther neighbour


# ---- cache policies: FP32 results do not depend on the cache ----

def batches(specs, n, seed):
    g = torch.Generator().manual_seed(seed)
    B, out = 32, []
    for _ in range(n):
        idx, off = [], [0]
        for rows, _ in specs:
            for _ in range(B):
                L = int(torch.randint(0, 5, (1,), generator=g))
                # skewed: low rows are hot, so a cache has hits
                idx += (torch.rand(L, generator=g) ** 3 * rows).long().tolist()
                off.append(len(idx))
        grad = torch.randn(B, sum(d for _, d in specs), generator=g)
        out.append((torch.tensor(idx, dtype=torch.int64), torch.tensor(off, dtype=torch.int64), grad))
    return out


@pytest.mark.parametrize("cache", ["wtinylfu", "lru", "lfu", "direct_mapped"])
@pytest.mark.parametrize("optimizer", ["sgd", "rowwise_adagrad", "adagrad", "adam"])
def test_cache_does_not_change_fp32_training(cache, optimizer):
    specs = [(400, 8), (150, 8)]
    kw = dict(storage="fp32", optimizer=optimizer, learning_rate=0.05, seed=2)
    ref = mpe_torch.TableBatchedEmbeddingBags(specs, cache="none", **kw)
    m = mpe_torch.TableBatchedEmbeddingBags(specs, cache=cache, cache_fraction=0.1, **kw)
    ref.init_uniform(-0.2, 0.2)
    m.init_uniform(-0.2, 0.2)
    for idx, off, grad in batches(specs, 8, seed=3):
        a, b = ref(idx, off), m(idx, off)
        assert torch.equal(a, b)
        a.backward(grad)
        b.backward(grad)
    s = m.stats()
    assert s["hits"] > 0 and s["evictions"] > 0, s  # the cache held rows and replaced some
    assert m.groups()[0]["type"].split("/")[1] == cache
    for t in range(2):
        assert torch.equal(ref.get_weights(t), m.get_weights(t))


# ---- optimizer-state precisions ----

@pytest.mark.parametrize("storage", ["fp32", "int8"])
@pytest.mark.parametrize("optimizer,state_values", [("adam", 16), ("adagrad", 8), ("rowwise_adagrad", 1)])
def test_state_precision(storage, optimizer, state_values):
    specs = [(300, 8)]
    data = batches(specs, 4, seed=9)
    runs = {}
    for prec in mpe_torch.STATE_PRECISIONS:
        m = mpe_torch.TableBatchedEmbeddingBags(specs, storage=storage, optimizer=optimizer, learning_rate=0.05,
                                                state_precision=prec, seed=4)
        m.init_uniform(-0.2, 0.2)
        ws = []
        for idx, off, grad in data:
            m(idx, off).backward(grad)
            ws.append(m.get_weights(0))
        value_bytes = 4 if prec == "fp32" else 2
        assert m.memory()["optimizer_bytes"] == 300 * state_values * value_bytes
        assert m.groups()[0]["type"].endswith("/" + prec)
        runs[prec] = ws
    for prec in ("bf16", "fp16"):
        assert torch.equal(runs[prec][0], runs["fp32"][0])  # step 1: the state is computed in FP32
        assert not torch.equal(runs[prec][-1], runs["fp32"][-1])  # then the stored state is rounded


def test_state_of_another_precision_or_cache_refused():
    specs = [(50, 4)]
    a = mpe_torch.TableBatchedEmbeddingBags(specs, storage="int8", optimizer="adam", state_precision="bf16")
    b = mpe_torch.TableBatchedEmbeddingBags(specs, storage="int8", optimizer="adam", state_precision="fp32")
    with pytest.raises((ValueError, RuntimeError), match="precision 'bf16' in file, 'fp32' here"):
        b.load_state_dict(a.state_dict())
    a = mpe_torch.TableBatchedEmbeddingBags(specs, storage="int8", cache="wtinylfu", cache_fraction=0.5)
    b = mpe_torch.TableBatchedEmbeddingBags(specs, storage="int8", cache="lru", cache_fraction=0.5)
    with pytest.raises(mpe_torch.CheckpointError, match="cache policy 'wtinylfu' in file, 'lru' here"):
        b.load_state_dict(a.state_dict())


# ---- FBGEMM layouts of the new formats ----

def test_bf16_export_import():
    m, _ = module("bf16")
    w = m.get_weights(0)
    fused = m.export_table(0)  # FBGEMM's plain bf16 rows
    assert fused.shape == (120, 16)
    assert torch.equal(fused.view(torch.bfloat16).float(), w)
    other, _ = module("bf16")
    other.set_weights(0, torch.zeros(120, 8))
    other.import_table(0, fused)
    assert torch.equal(other.get_weights(0), w)
    with pytest.raises(ValueError, match="storage, 'bf16', has no 'tbe_inference' layout"):
        m.export_table(0, layout="tbe_inference")
    with pytest.raises(ValueError, match="'bf16', has no 'tbe_inference' layout"):
        m.import_table(0, fused, layout="tbe_inference")
    with pytest.raises(ValueError, match="format 'bf16', has no 'tbe_inference' layout"):
        module("int8")[0].export_table(0, layout="tbe_inference", format="bf16")
    # a converting export to bf16 rounds to nearest, as torch does
    i8 = module("int8")[0]
    assert torch.equal(i8.export_table(1, format="bf16").view(torch.bfloat16).float(),
                       i8.get_weights(1).to(torch.bfloat16).float())


@pytest.mark.parametrize("storage", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_exports_converted_only(storage):
    m, _ = module(storage)
    w = m.get_weights(1)
    for layout in ("fbgemm_fused", "tbe_inference"):
        with pytest.raises(ValueError, match=f"storage, '{storage}', has no '{layout}' layout"):
            m.export_table(1, layout=layout)
    assert torch.equal(m.export_table(1, format="fp32").view(torch.float32), w)  # exact
    assert torch.equal(m.export_table(1, format="bf16").view(torch.bfloat16).float(), w.to(torch.bfloat16).float())
    assert torch.equal(m.export_table(1, layout="tbe_inference", format="fp16").view(torch.float16).float(),
                       w.half().float())
    with pytest.raises(ValueError, match=f"'{storage}', has no 'fbgemm_fused' layout.*import_table reads"):
        m.import_table(1, torch.zeros(80, 12, dtype=torch.uint8))
