# SPDX-License-Identifier: Apache-2.0
"""mpe_torch.TieredRows against a plain-Python simulator of mpe's tiering rules
(include/mpe/embedding/tiered_rows.hpp, written out here independently), its rows moved
through a TableBatchedEmbeddingBags, its state saved and verified."""
import random

import pytest
import torch

import mpe_torch

M64 = (1 << 64) - 1


def mix64(z):
    """splitmix64's finalizer (mpe::mix64)."""
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class Simulator:
    """The rules of mpe::TieredRows' class comment, with dicts and lists."""

    def __init__(self, ids, private_rows, shared_rows, promote_at, demote_below, decay_every, sketch_width, seed):
        self.P, self.S, self.W = private_rows, shared_rows, sketch_width
        self.promote_at, self.demote_below, self.decay_every, self.seed = promote_at, demote_below, decay_every, seed
        self.salt = mix64(seed ^ 0x9E3779B97F4A7C15)  # as u64; key = id ^ salt (two's complement)
        self.sketch = [0] * (4 * sketch_width)
        self.hot = {}  # id -> [row, count]
        self.clock = 0
        self.stats = dict(lookups=0, private_lookups=0, shared_lookups=0, promotions=0, demotions=0, decays=0,
                          refused_promotions=0)

    def cells(self, i):
        key = (i ^ self.salt) & M64
        return [k * self.W + (mix64((key * 4 + k + 0x5BD1E995) & M64) & (self.W - 1)) for k in range(4)]

    def row(self, i):
        if i in self.hot:
            return self.hot[i][0]
        return self.P + mix64(i ^ self.seed) % self.S

    def map(self, batch):
        if self.clock >= self.decay_every:
            self.sketch = [c >> 1 for c in self.sketch]
            for i in list(self.hot):
                self.hot[i][1] >>= 1
                if self.hot[i][1] < self.demote_below:
                    del self.hot[i]
                    self.stats["demotions"] += 1
            self.stats["decays"] += 1
            self.clock = 0
        moves = []
        for i in sorted(set(batch)):
            if i in self.hot:
                self.hot[i][1] = min(self.hot[i][1] + 1, 2**32 - 1)
                continue
            cs = self.cells(i)
            for c in cs:
                self.sketch[c] = min(self.sketch[c] + 1, 255)
            est = min(self.sketch[c] for c in cs)
            if est >= self.promote_at:
                used = {r for r, _ in self.hot.values()}
                free = [r for r in range(self.P) if r not in used]
                if free:
                    moves.append((i, self.row(i), free[0]))
                    self.hot[i] = [free[0], est]
                    self.stats["promotions"] += 1
                else:
                    self.stats["refused_promotions"] += 1
        self.clock += len(set(batch))
        rows = [self.row(i) for i in batch]
        self.stats["lookups"] += len(batch)
        self.stats["private_lookups"] += sum(r < self.P for r in rows)
        self.stats["shared_lookups"] += sum(r >= self.P for r in rows)
        return rows, moves


CFG = dict(ids=400, private_rows=24, shared_rows=40, promote_at=3, demote_below=2, decay_every=150, sketch_width=64,
           seed=2**63 + 12345)


def stream(n, seed):
    """Batches of ids with a moving hot set (so ids are promoted, refused and demoted)."""
    rng = random.Random(seed)
    out = []
    for b in range(n):
        hot = [(b // 25 * 37 + k) % CFG["ids"] for k in range(30)]
        out.append([rng.choice(hot) if rng.random() < 0.6 else rng.randrange(CFG["ids"]) for _ in range(40)])
    return out


def test_every_batch_matches_the_simulator():
    tiers, sim = mpe_torch.TieredRows(**CFG), Simulator(**CFG)
    for batch in stream(300, seed=1):
        want_rows, want_moves = sim.map(batch)
        rows = tiers(torch.tensor(batch).reshape(4, 10))  # any shape: rows come back in it
        assert rows.shape == (4, 10) and rows.reshape(-1).tolist() == want_rows
        assert [tuple(m) for m in tiers.last_moves().tolist()] == want_moves
        assert tiers.stats() == sim.stats
        assert tiers.hot_ids == len(sim.hot)
    s = sim.stats
    assert s["promotions"] > 50 and s["demotions"] > 20 and s["decays"] > 20 and s["refused_promotions"] > 20, s
    # lookup and eval mode count nothing and give the rows the map gives now.
    before = tiers.stats()
    tiers.eval()
    ids = torch.arange(CFG["ids"])
    assert tiers(ids).tolist() == [sim.row(i) for i in range(CFG["ids"])] == tiers.lookup(ids).tolist()
    assert tiers.row_of(7) == sim.row(7) and tiers.stats() == before


def test_promoted_rows_start_from_their_shared_rows_weights():
    tiers = mpe_torch.TieredRows(**CFG)
    D = 8
    emb = mpe_torch.TableBatchedEmbeddingBags([(tiers.physical_rows, D)], storage="fp32", optimizer="sgd",
                                              learning_rate=0.1, seed=3, weights_init=(-1.0, 1.0))
    copied = 0
    for step, batch in enumerate(stream(60, seed=2)):
        rows = tiers.map(torch.tensor(batch))
        before = emb.get_weights(0)
        tiers.copy_moved_rows(emb, 0)
        after = emb.get_weights(0)
        moved = tiers.last_moves()
        for _, src, dst in moved.tolist():
            assert torch.equal(after[dst], before[src])  # fp32 store: an exact copy
        untouched = torch.ones(tiers.physical_rows, dtype=torch.bool)
        untouched[moved[:, 2]] = False
        assert torch.equal(after[untouched], before[untouched])
        copied += moved.shape[0]
        # The pooled output is the plain FP32 embedding bag over the physical rows. Tolerance:
        # none needed for values; the sums of 4 floats may be added in another order (1e-6).
        offsets = torch.arange(0, 41, 4)
        out = emb(rows, offsets)
        ref = torch.nn.functional.embedding_bag(rows, after, offsets[:-1], mode="sum")
        torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(step)))
    assert copied > 20


def test_int8_copy_requantizes_and_keeps_errors_named():
    tiers = mpe_torch.TieredRows(**CFG)
    emb = mpe_torch.TableBatchedEmbeddingBags([(tiers.physical_rows, 8)], storage="int8", cache="lru",
                                              cache_fraction=0.5, seed=4)
    for batch in stream(10, seed=3):
        rows = tiers.map(torch.tensor(batch))
        w = emb.get_weights(0)
        tiers.copy_moved_rows(emb, 0)
        for _, src, dst in tiers.last_moves().tolist():
            # Re-quantized into an 8-bit row of the source's range with stochastic rounding:
            # each value within one code step (the range / 255) of the source's.
            step = float(w[src].max() - w[src].min()) / 255
            assert torch.allclose(emb.get_weights(0)[dst], w[src], atol=step + 1e-7)
        out = emb(rows, torch.arange(0, 41, 4))
        out.backward(torch.ones_like(out))
    small = mpe_torch.TableBatchedEmbeddingBags([(10, 8)], seed=4)
    tiers.map(torch.tensor(stream(1, seed=9)[0]))
    with pytest.raises(ValueError, match="table 0 has 10 rows; this map needs physical_rows = 64"):
        tiers.copy_moved_rows(small, 0)
    with pytest.raises(IndexError, match=r"src_rows\[1\] = 10 is outside \[0, 10\) of table 0"):
        small.copy_rows(0, torch.tensor([0, 10]), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="src_rows has 1 rows, dst_rows 2"):
        small.copy_rows(0, torch.tensor([0]), torch.tensor([1, 2]))


def test_state_resumes_exactly_and_bad_state_changes_nothing():
    a = mpe_torch.TieredRows(**CFG)
    batches = stream(120, seed=4)
    for batch in batches[:60]:
        a.map(torch.tensor(batch))
    state = a.state_dict()
    b = mpe_torch.TieredRows(**CFG)
    b.load_state_dict(state)
    assert b.stats() == a.stats() and b.hot_ids == a.hot_ids
    for batch in batches[60:]:
        assert torch.equal(a.map(torch.tensor(batch)), b.map(torch.tensor(batch)))
        assert torch.equal(a.last_moves(), b.last_moves())
    assert a.state_dict()["_extra_state"].tolist() == b.state_dict()["_extra_state"].tolist()
    # A flipped byte (CRC-32C), another configuration: refused, nothing changes.
    ids = torch.arange(CFG["ids"])
    rows = b.lookup(ids)
    bad = state["_extra_state"].clone()
    bad[100] ^= 1
    with pytest.raises(mpe_torch.CheckpointError, match="CRC-32C mismatch"):
        b.load_state_dict({"_extra_state": bad})
    with pytest.raises(mpe_torch.CheckpointError, match="config field private_rows = 24 differs from this object's 25"):
        mpe_torch.TieredRows(**dict(CFG, private_rows=25)).load_state_dict(state)
    assert torch.equal(b.lookup(ids), rows)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="TieredRowsConfig::promote_at = 0"):
        mpe_torch.TieredRows(**dict(CFG, promote_at=0))
    with pytest.raises(ValueError, match="TieredRowsConfig::shared_rows = 0"):
        mpe_torch.TieredRows(**dict(CFG, shared_rows=0))
    with pytest.raises(TypeError, match="ids = 1.5 must be an integer"):
        mpe_torch.TieredRows(**dict(CFG, ids=1.5))
    tiers = mpe_torch.TieredRows(**CFG)
    with pytest.raises(IndexError, match=r"ids\[2\] = 400"):
        tiers.map(torch.tensor([1, 2, 400]))
    assert tiers.stats()["lookups"] == 0  # nothing counted
    with pytest.raises(TypeError, match="dtype torch.int64, got torch.int32"):
        tiers.map(torch.tensor([1], dtype=torch.int32))
    assert "private_rows=24" in repr(tiers) and tiers.memory_bytes() == 4 * 64 + 12 * 24 + 4 * 64


def test_moves_are_copied_once_and_evaluation_changes_nothing():
    tiers = mpe_torch.TieredRows(**CFG)
    emb = mpe_torch.TableBatchedEmbeddingBags([(tiers.physical_rows, 4)], storage="fp32", seed=5)
    assert tiers.copy_moved_rows(emb, 0) is False  # no map yet
    batch = torch.tensor([1, 1, 1, 2, 2, 2, 3])
    for _ in range(3):
        tiers(batch)
    assert tiers.last_moves().shape[0] > 0
    assert tiers.copy_moved_rows(emb, 0) is True
    trained = emb.get_weights(0)
    trained[tiers.last_moves()[:, 2]] += 1.0  # stands for training since the copy
    emb.set_weights(0, trained)
    state = tiers.get_extra_state()
    with torch.no_grad():
        tiers(batch)  # training mode, no gradients: a lookup
    tiers.eval()
    tiers(batch)
    with pytest.raises(IndexError):
        tiers.map(torch.tensor([CFG["ids"]]))
    assert torch.equal(tiers.get_extra_state(), state)  # nothing counted
    assert tiers.copy_moved_rows(emb, 0) is False and torch.equal(emb.get_weights(0), trained)
    with pytest.raises(TypeError, match="module must be a TableBatchedEmbeddingBags, got Linear"):
        tiers.copy_moved_rows(torch.nn.Linear(2, 2), 0)
    with pytest.raises(IndexError, match=r"table = 5 is outside \[0, 1\)"):
        tiers.copy_moved_rows(emb, 5)
    with pytest.raises(TypeError, match="table = True must be an integer"):
        tiers.copy_moved_rows(emb, True)
    with pytest.raises(IndexError, match=r"id = 1180591620717411303424 is outside \[0, 400\)"):
        tiers.row_of(2**70)
    with pytest.raises(TypeError, match="cannot be deep-copied"):
        import copy
        copy.deepcopy(tiers)
