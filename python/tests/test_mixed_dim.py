# SPDX-License-Identifier: Apache-2.0
"""Tables of different D (mpe::MixedDimEmbedding: one CachedEmbedding per distinct D), outputs in the columns
of each table. Compared bit for bit with one single-table module per table (the same mpe
arithmetic) and with nn.EmbeddingBag (Fp32, sum, no per-sample weights: bit for bit, see
test_reference.py)."""
import torch

import mpe_torch
from conftest import make_csr

DIMS = [1, 3, 16, 64, 130]
SPECS = [(37, 16), (5, 1), (80, 130), (11, 3), (64, 64), (20, 1), (9, 16)]  # D = 1, 3, 16, 64, 130, repeated


def test_columns_and_groups():
    m = mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="fp32", optimizer="sgd", learning_rate=0.1)
    groups = m.groups()
    assert [g["dim"] for g in groups] == [16, 1, 130, 3, 64]
    assert [g["tables"] for g in groups] == [[0, 6], [1, 5], [2], [3], [4]]
    assert sorted({d for _, d in SPECS}) == DIMS
    total = sum(d for _, d in SPECS)
    assert m.total_dim == total
    # table t, row r, column d holds 1000 * t + r + d / 1000: every output value names its source
    for t, (rows, D) in enumerate(SPECS):
        w = (1000.0 * t + torch.arange(rows, dtype=torch.float32)[:, None]
             + torch.arange(D, dtype=torch.float32)[None, :] / 1000)
        m.set_weights(t, w)
        assert torch.equal(m.get_weights(t), w)
    B = 6
    # one index per bag: bag (t, b) reads row b % rows
    idx = torch.tensor([b % rows for rows, _ in SPECS for b in range(B)], dtype=torch.int64)
    off = torch.arange(len(SPECS) * B + 1, dtype=torch.int64)
    out = m(idx, off)
    assert out.shape == (B, total)
    col = 0
    for t, (rows, D) in enumerate(SPECS):
        for b in range(B):
            want = (1000.0 * t + b % rows + torch.arange(D, dtype=torch.float32) / 1000)
            assert torch.equal(out[b, col:col + D], want), (t, b)
        col += D


def test_equals_single_table_modules_and_embedding_bag():
    B = 10
    mixed = mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="fp32", optimizer="sgd", learning_rate=0.1)
    singles = [mpe_torch.TableBatchedEmbeddingBags([s], storage="fp32", optimizer="sgd", learning_rate=0.1)
               for s in SPECS]
    g = torch.Generator().manual_seed(0)
    bags = []
    for t, (rows, D) in enumerate(SPECS):
        w = torch.randn(rows, D, generator=g)
        mixed.set_weights(t, w)
        singles[t].set_weights(0, w)
        bag = torch.nn.EmbeddingBag(rows, D, mode="sum", include_last_offset=True)
        with torch.no_grad():
            bag.weight.copy_(w)
        bags.append(bag)
    total = sum(d for _, d in SPECS)
    for step in range(3):
        idx, off = make_csr([r for r, _ in SPECS], B, 4, seed=step)
        grad = torch.randn(B, total, generator=g)
        out = mixed(idx, off)
        col = 0
        for t, (rows, D) in enumerate(SPECS):
            lo, hi = int(off[t * B]), int(off[(t + 1) * B])
            o = singles[t](idx[lo:hi], off[t * B:(t + 1) * B + 1] - lo)
            assert torch.equal(out[:, col:col + D], o), (step, t)
            if step == 0:
                ref = bags[t](idx[lo:hi], off[t * B:(t + 1) * B + 1] - lo)
                assert torch.equal(o, ref)
            o.backward(grad[:, col:col + D].contiguous())
            col += D
        out.backward(grad)
    for t in range(len(SPECS)):
        assert torch.equal(mixed.get_weights(t), singles[t].get_weights(0)), t


def test_per_sample_weights_and_mean_mixed():
    B = 5
    for mode in ("sum", "mean"):
        mixed = mpe_torch.TableBatchedEmbeddingBags(SPECS, pooling_mode=mode)
        mixed.init_uniform(-1, 1)
        idx, off = make_csr([r for r, _ in SPECS], B, 4, seed=9)
        psw = torch.rand(idx.numel()) if mode == "sum" else None
        out = mixed(idx, off, psw)
        col = 0
        for t, (rows, D) in enumerate(SPECS):
            single = mpe_torch.TableBatchedEmbeddingBags([(rows, D)], pooling_mode=mode)
            single.set_weights(0, mixed.get_weights(t))
            lo, hi = int(off[t * B]), int(off[(t + 1) * B])
            o = single(idx[lo:hi], off[t * B:(t + 1) * B + 1] - lo, None if psw is None else psw[lo:hi].contiguous())
            assert torch.equal(out[:, col:col + D], o)
            col += D


def test_bad_index_in_second_group_changes_nothing():
    m = mpe_torch.TableBatchedEmbeddingBags(SPECS, cache="lru", cache_fraction=0.5, storage="int8")
    B = 2
    idx, off = make_csr([r for r, _ in SPECS], B, 3, seed=1, empty_bags=False)
    bad = idx.clone()
    p = int(off[4 * B])  # first index of table 4 (D = 64, group 4)
    bad[p] = 64
    before = m.stats()
    try:
        m(bad, off)
        raise AssertionError("no error")
    except ValueError as e:
        assert f"indices[{p}] = 64 is outside table 4 (64 rows" in str(e)
    assert m.stats() == before
