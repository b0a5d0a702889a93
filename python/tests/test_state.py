# SPDX-License-Identifier: Apache-2.0
"""state_dict round trip: training resumed from it is bit-identical to uninterrupted training."""
import io

import pytest
import torch

import mpe_torch
from conftest import make_csr

CONFIGS = [
    dict(specs=[(300, 16), (50, 16)], storage="fp32", cache="none", optimizer="sgd", learning_rate=0.1),
    dict(specs=[(300, 16), (50, 16)], storage="int8", cache="lru", cache_fraction=0.2, rounding="stochastic",
         optimizer="rowwise_adagrad", learning_rate=0.05),
    dict(specs=[(300, 8), (50, 3), (70, 8)], storage="int4", cache="lru", cache_fraction=0.3, rounding="nearest",
         optimizer="adam", learning_rate=0.01),
    dict(specs=[(300, 4), (50, 12)], storage="fp16", cache="none", rounding="stochastic", optimizer="adagrad",
         learning_rate=0.1),
    # the other storage formats, cache policies and optimizer-state precisions
    dict(specs=[(300, 16), (50, 16)], storage="bf16", cache="lru", cache_fraction=0.2, rounding="stochastic",
         optimizer="sgd", learning_rate=0.1),
    dict(specs=[(300, 8), (50, 3)], storage="fp8_e4m3", cache="lru", cache_fraction=0.3, rounding="stochastic",
         optimizer="rowwise_adagrad", learning_rate=0.05),
    dict(specs=[(300, 8), (50, 8)], storage="fp8_e5m2", cache="none", rounding="nearest", optimizer="adam",
         learning_rate=0.01),
    dict(specs=[(300, 16), (50, 16)], storage="int8", cache="wtinylfu", cache_fraction=0.3, rounding="stochastic",
         optimizer="adam", learning_rate=0.01),
    dict(specs=[(300, 8), (50, 4)], storage="int8", cache="lru", cache_fraction=0.3, rounding="stochastic",
         optimizer="adam", learning_rate=0.01, state_precision="bf16"),
    dict(specs=[(300, 8), (50, 8)], storage="fp32", cache="none", rounding="stochastic", optimizer="adagrad",
         learning_rate=0.1, state_precision="bf16"),
    dict(specs=[(300, 8), (50, 8)], storage="fp32", cache="lru", cache_fraction=0.3, rounding="stochastic",
         optimizer="adagrad", learning_rate=0.1, state_precision="bf16"),
    dict(specs=[(300, 8)], storage="int8", cache="lru", cache_fraction=0.3, rounding="stochastic",
         optimizer="rowwise_adagrad", learning_rate=0.05, state_precision="fp16"),
]


def batches(specs, n, seed):
    B = 32
    total = sum(d for _, d in specs)
    out = []
    for s in range(n):
        idx, off = make_csr([r for r, _ in specs], B, 4, seed=seed + s)
        g = torch.randn(B, total, generator=torch.Generator().manual_seed(seed + 1000 + s))
        out.append((idx, off, g))
    return out


def train(m, data, lr_schedule=None, first_step=0):
    outs = []
    for k, (idx, off, g) in enumerate(data, start=first_step):
        if lr_schedule:
            m.set_learning_rate(lr_schedule(k))
        out = m(idx, off)
        out.backward(g)
        outs.append(out.detach().clone())
    return outs


def snapshot(m):
    return [m.get_weights(t) for t in range(m.num_tables)], m.stats(), m.step


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c['storage']}-{c['cache']}-{c['optimizer']}-"
                                                    f"{c.get('state_precision', 'fp32')}")
def test_resume_bit_identical(cfg):
    data = batches(cfg["specs"], 12, seed=7)
    sched = lambda k: cfg["learning_rate"] * (1 + 0.1 * (k % 3))  # noqa: E731
    a = mpe_torch.TableBatchedEmbeddingBags(seed=11, **cfg)
    a.init_uniform(-0.1, 0.1)
    outs_a = train(a, data, sched)

    b = mpe_torch.TableBatchedEmbeddingBags(seed=11, **cfg)
    b.init_uniform(-0.1, 0.1)
    train(b, data[:5], sched)
    buf = io.BytesIO()
    torch.save(b.state_dict(), buf)
    del b
    buf.seek(0)
    sd = torch.load(buf)  # weights_only=True (the default): the state is tensors and plain values
    c = mpe_torch.TableBatchedEmbeddingBags(seed=999, **cfg)  # another seed: the state carries it
    c.load_state_dict(sd)
    outs_c = train(c, data[5:], sched, first_step=5)
    for x, y in zip(outs_a[5:], outs_c):
        assert torch.equal(x, y)
    wa, sa, ka = snapshot(a)
    wc, sc, kc = snapshot(c)
    assert ka == kc == 12 and sa == sc
    for x, y in zip(wa, wc):
        assert torch.equal(x, y)
    # and the checkpoint bytes themselves agree
    for k, v in a.state_dict().items():
        if torch.is_tensor(v):
            assert torch.equal(v, c.state_dict()[k]), k


def test_state_dict_keys_and_nested():
    cfg = CONFIGS[2]
    m = mpe_torch.TableBatchedEmbeddingBags(**cfg)
    sd = m.state_dict()
    assert sorted(sd) == ["_extra_state", "mpe_state"]
    assert sd["mpe_state"].dtype == torch.uint8 and sd["mpe_state"].dim() == 1
    assert bytes(sd["mpe_state"][:8].tolist()) == b"MPEMIXD1"  # the container of MixedDimEmbedding
    assert m.num_groups == 2
    outer = torch.nn.Sequential()
    outer.add_module("emb", mpe_torch.TableBatchedEmbeddingBags(**cfg))
    outer.add_module("lin", torch.nn.Linear(3, 1))
    keys = set(outer.state_dict())
    assert {"emb.mpe_state", "emb._extra_state", "lin.weight", "lin.bias"} == keys
    outer.load_state_dict(outer.state_dict())


def trained_module(cfg):
    """A module of `cfg` trained two steps, and its snapshot."""
    m = mpe_torch.TableBatchedEmbeddingBags(**cfg)
    m.init_uniform(-0.1, 0.1)
    train(m, batches(cfg["specs"], 2, seed=1))
    return m, snapshot(m)


def assert_unchanged(m, before):
    after = snapshot(m)
    assert before[1:] == after[1:] and all(torch.equal(x, y) for x, y in zip(before[0], after[0]))


def test_bad_state_changes_nothing():
    cfg = CONFIGS[1]
    m, before = trained_module(cfg)
    sd = m.state_dict()
    bad = dict(sd)
    bad["mpe_state"] = sd["mpe_state"].clone()
    bad["mpe_state"][200] ^= 0xFF  # a flipped byte: the container's checksum fails
    with pytest.raises(mpe_torch.CheckpointError, match="checksum|crc|CRC"):
        m.load_state_dict(bad)
    assert_unchanged(m, before)
    # another storage format's state is refused by mpe, naming both
    other = mpe_torch.TableBatchedEmbeddingBags(**dict(cfg, storage="int4"))
    with pytest.raises(mpe_torch.CheckpointError, match="int4_rowwise"):
        m.load_state_dict(other.state_dict())
    # another shape is refused before mpe is asked
    with pytest.raises(ValueError, match="specs"):
        m.load_state_dict(mpe_torch.TableBatchedEmbeddingBags(**dict(cfg, specs=[(300, 16)])).state_dict())
    with pytest.raises(RuntimeError, match="Missing key"):  # neither half: PyTorch's strict check
        m.load_state_dict({})


def test_backward_after_load_refused():
    cfg = CONFIGS[0]
    m = mpe_torch.TableBatchedEmbeddingBags(**cfg)
    (idx, off, g), = batches(cfg["specs"], 1, seed=3)
    out = m(idx, off)
    m.load_state_dict(m.state_dict())
    with pytest.raises(RuntimeError, match="last training forward"):
        out.backward(g)


def test_loaded_seed_replaces_the_modules():
    cfg = CONFIGS[2]  # two D-groups
    a = mpe_torch.TableBatchedEmbeddingBags(**dict(cfg, seed=5))
    a.init_uniform(-0.1, 0.1)
    train(a, batches(cfg["specs"], 2, seed=7))
    b = mpe_torch.TableBatchedEmbeddingBags(**dict(cfg, seed=99))
    b.load_state_dict(a.state_dict())
    assert b.groups()[0]["seed"] == 5 and b.state_dict()["_extra_state"]["config"]["seed"] == 5
    assert [g["seed"] for g in b.groups()] == [g["seed"] for g in a.groups()]
    data = batches(cfg["specs"], 2, seed=8)
    assert all(torch.equal(x, y) for x, y in zip(train(a, data), train(b, data)))


def test_format_1_state_is_named():
    """A state written before the module used MixedDimEmbedding (one `mpe_group_<g>` tensor per
    D-group, `_extra_state` format 1) is refused naming its format, with strict on or off."""
    cfg = CONFIGS[2]
    m = mpe_torch.TableBatchedEmbeddingBags(**cfg)
    sd = m.state_dict()
    old = {"mpe_group_0": sd["mpe_state"], "mpe_group_1": sd["mpe_state"],
           "_extra_state": dict(sd["_extra_state"], format=1)}
    for strict in (True, False):
        with pytest.raises(ValueError, match="state format 1"):
            m.load_state_dict(old, strict=strict)


def test_malformed_extra_state_is_named():
    """An `_extra_state` of the right format whose structure is damaged (missing or mistyped
    config, optimizer_params or specs) is a ValueError naming the key, and changes nothing."""
    m, before = trained_module(CONFIGS[1])
    sd = m.state_dict()
    extra = sd["_extra_state"]
    params = {k: v for k, v in extra["optimizer_params"].items() if k != "eps"}
    for bad in (dict(extra, config=None), {k: v for k, v in extra.items() if k != "config"},
                {k: v for k, v in extra.items() if k != "optimizer_params"}, dict(extra, optimizer_params=3),
                dict(extra, optimizer_params=params),
                dict(extra, optimizer_params=dict(extra["optimizer_params"], beta1="0.9"))):
        with pytest.raises(ValueError, match="_extra_state is malformed"):
            m.load_state_dict(dict(sd, _extra_state=bad))
    for not_state in (None, {}):
        with pytest.raises(ValueError, match="_extra_state is not an mpe_torch state"):
            m.load_state_dict(dict(sd, _extra_state=not_state))
    with pytest.raises(ValueError, match="mpe_state must be a uint8 tensor"):
        m.load_state_dict(dict(sd, mpe_state=None))
    # One half without the other loads nothing, strict or not, and says so.
    for strict in (True, False):
        for key in ("mpe_state", "_extra_state"):
            with pytest.raises(ValueError, match="both are needed to load it, nothing was loaded"):
                m.load_state_dict({k: v for k, v in sd.items() if k != key}, strict=strict)
    with pytest.raises(ValueError, match="specs = 7 is not a list"):
        m.load_state_dict(dict(sd, _extra_state=dict(extra, config=dict(extra["config"], specs=7))))
    assert_unchanged(m, before)
    other, _ = trained_module(dict(CONFIGS[1], seed=9))
    other.load_state_dict(sd)  # the intact state still loads, and replaces the weights
    assert all(torch.equal(other.get_weights(t), before[0][t]) for t in range(other.num_tables))


@pytest.mark.parametrize("cache", ["lru", "second_touch_lru"])
def test_slot_index_same_bits(cache):
    """slot_index=True (mpe's row -> slot index) costs 4 bytes a row of the store and changes no bit: training
    outputs, eval outputs, weights and the state are those of the module without it, and a
    state moves between the two either way."""
    cfg = dict(specs=[(300, 8), (50, 3), (70, 8)], storage="int8", cache=cache, cache_fraction=0.1,
               optimizer="rowwise_adagrad", learning_rate=0.05, seed=3)
    with pytest.raises(TypeError, match="slot_index = 1 must be a bool"):
        mpe_torch.TableBatchedEmbeddingBags(slot_index=1, **cfg)
    a = mpe_torch.TableBatchedEmbeddingBags(**cfg)
    b = mpe_torch.TableBatchedEmbeddingBags(slot_index=True, **cfg)
    assert "slot_index=True" in repr(b) and "slot_index=False" in repr(a)
    # The entries live in the store rows (INT8, D = 8: 16 -> 20 B; D = 3: 12 -> 16 B).
    assert b.memory()["store_bytes"] - a.memory()["store_bytes"] == 4 * (300 + 50 + 70)
    assert b.memory()["cache_bytes"] == a.memory()["cache_bytes"]
    for m in (a, b):
        m.init_uniform(-0.1, 0.1)
    data = batches(cfg["specs"], 8, seed=21)
    for x, y in zip(train(a, data), train(b, data)):
        assert torch.equal(x, y)
    evals = batches(cfg["specs"], 3, seed=77)
    for m in (a, b):
        m.eval()
    with torch.no_grad():
        for idx, off, _ in evals:
            assert torch.equal(a(idx, off), b(idx, off))
    assert a.stats()["hits"] > 0  # the cache holds rows: the eval forwards read some from it
    for t in range(a.num_tables):
        assert torch.equal(a.get_weights(t), b.get_weights(t))
    for k, v in a.state_dict().items():
        if torch.is_tensor(v):
            assert torch.equal(v, b.state_dict()[k]), k
    # A state of the module without the index loads into one with it (the index is rebuilt
    # from the loaded cache) and the other way round; each keeps its own setting.
    c = mpe_torch.TableBatchedEmbeddingBags(slot_index=True, **cfg)
    c.load_state_dict(a.state_dict())
    d = mpe_torch.TableBatchedEmbeddingBags(**cfg)
    d.load_state_dict(b.state_dict())
    assert "slot_index=True" in repr(c) and "slot_index=False" in repr(d)
    with torch.no_grad():
        for m in (c, d):
            m.eval()
        for idx, off, _ in evals:
            want = a(idx, off)
            assert torch.equal(c(idx, off), want) and torch.equal(d(idx, off), want)


@pytest.mark.parametrize("cache", ["lru", "wtinylfu"])
def test_defer_admission_same_bits(cache):
    """defer_admission=True (mpe's admission at backward) trains the bits of the module without
    it: each step's outputs, the weights, the statistics after each backward and the state; a
    training forward without a backward is admitted (and counted) by the next forward, as the
    twin counted it in its own; the setting is a bool."""
    cfg = dict(specs=[(300, 8), (50, 3), (70, 8)], storage="int8", cache=cache, cache_fraction=0.1,
               optimizer="adagrad", learning_rate=0.05, seed=5, slot_index=True)
    with pytest.raises(TypeError, match="defer_admission = 1 must be a bool"):
        mpe_torch.TableBatchedEmbeddingBags(defer_admission=1, **cfg)
    a = mpe_torch.TableBatchedEmbeddingBags(**cfg)
    b = mpe_torch.TableBatchedEmbeddingBags(defer_admission=True, **cfg)
    assert "defer_admission=True" in repr(b) and "defer_admission=False" in repr(a)
    for m in (a, b):
        m.init_uniform(-0.1, 0.1)
    for idx, off, g in batches(cfg["specs"], 10, seed=31):
        x, y = a(idx, off), b(idx, off)
        assert torch.equal(x, y)
        x.backward(g)
        y.backward(g)
        assert a.stats() == b.stats()
    assert a.stats()["evictions"] > 0
    for t in range(a.num_tables):
        assert torch.equal(a.get_weights(t), b.get_weights(t))
    for k, v in a.state_dict().items():
        if torch.is_tensor(v):
            assert torch.equal(v, b.state_dict()[k]), k
    # A training forward with no backward: nothing counted until the next forward admits it.
    before = b.stats()
    idx, off, _ = batches(cfg["specs"], 1, seed=99)[0]
    b(idx, off)
    assert b.stats() == before
    assert torch.equal(a(idx, off), b(idx, off))  # b admits its first forward's batch here
    assert a.stats() == b.stats()
