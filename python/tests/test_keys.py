# SPDX-License-Identifier: Apache-2.0
"""row_keys / column_keys (mpe's MixedDimConfig::row_keys / column_keys) and init_uniform with a range per
table: a table sharded as TorchRec shards it (table-wise: a module holds whole tables of a larger set;
column-wise: a module holds a column slice of a table) initializes, rounds stochastically and trains with
exactly the bits of the unsharded module. Compared bit for bit against the unsharded module (forward outputs
at every step, get_weights after 10 SGD steps; no cache), and, without the keys, the pieces differ."""
import pytest
import torch

import mpe_torch
from conftest import make_csr

SEED = 1234567


def table_csr(idx, off, T, B, t):
    """Table t's share of a table-major batch, as a one-table batch."""
    lo, hi = int(off[t * B]), int(off[(t + 1) * B])
    return idx[lo:hi].clone(), (off[t * B:(t + 1) * B + 1] - lo).clone()


def tables_csr(idx, off, T, B, tables):
    """The share of `tables` (in that order) of a table-major batch."""
    parts = [table_csr(idx, off, T, B, t) for t in tables]
    out_idx = torch.cat([p[0] for p in parts])
    out_off, base = [0], 0
    for i, o in parts:
        out_off += [base + int(x) for x in o[1:]]
        base += len(i)
    return out_idx, torch.tensor(out_off, dtype=torch.int64)


def bits(t):
    return t.contiguous().view(torch.int32)


def same(a, b):
    return a.shape == b.shape and torch.equal(bits(a), bits(b))


def module(specs, storage, **kw):
    return mpe_torch.TableBatchedEmbeddingBags(specs, storage=storage, rounding="stochastic", optimizer="sgd",
                                               learning_rate=0.05, seed=SEED, **kw)


def train_split(whole, pieces, specs, steps=10, B=8):
    """Trains `whole` and `pieces` [(module, tables, [(column of whole's output, width) per table])] on the same
    batches; checks each piece's outputs against whole's columns at every step."""
    T = len(specs)
    total = sum(d for _, d in specs)
    gen = torch.Generator().manual_seed(7)
    for step in range(steps):
        idx, off = make_csr([r for r, _ in specs], B, 5, seed=100 + step)
        out = whole(idx, off)
        grad = torch.rand(B, total, generator=gen) * 2 - 1
        for m, tables, cols in pieces:
            i, o = tables_csr(idx, off, T, B, tables)
            p = m(i, o)
            want = torch.cat([out[:, c:c + w] for c, w in cols], dim=1)
            assert same(p, want), (step, tables)
            p.backward(torch.cat([grad[:, c:c + w] for c, w in cols], dim=1).contiguous())
        out.backward(grad)


def test_column_split_trains_with_the_full_tables_bits():
    # A set of tables (30, 64), (50, 64); table 1 split into columns [0, 32) and [32, 64).
    specs = [(30, 64), (50, 64)]
    for storage in ("fp32", "fp16", "bf16"):
        full = module(specs, storage)
        lo = module([(50, 32)], storage, row_keys=[30], column_keys=[0])
        hi = module([(50, 32)], storage, row_keys=[30], column_keys=[32])
        unkeyed = module([(50, 32)], storage, row_keys=[30])  # columns [32, 64) without their key
        for m in (full, lo, hi, unkeyed):
            m.init_uniform(-0.5, 0.5)
        w = full.get_weights(1)
        assert same(lo.get_weights(0), w[:, :32]) and same(hi.get_weights(0), w[:, 32:]), storage
        assert not same(unkeyed.get_weights(0), w[:, 32:])
        train_split(full, [(lo, [1], [(64, 32)]), (hi, [1], [(96, 32)])], specs)
        w = full.get_weights(1)
        assert same(lo.get_weights(0), w[:, :32]), storage
        assert same(hi.get_weights(0), w[:, 32:]), storage


@pytest.mark.parametrize("storage", mpe_torch.STORAGES)
def test_table_split_trains_with_the_sets_bits(storage):
    # Table-wise: a set of two tables of one D (no keys: its rows are the set's) split into one-table modules
    # keyed by the tables' first rows in the set.
    specs = [(40, 32), (25, 32)]
    whole = module(specs, storage)
    a = module([specs[0]], storage, row_keys=[0])
    b = module([specs[1]], storage, row_keys=[40])
    for m in (whole, a, b):
        m.init_uniform(-0.25, 0.25)
    assert same(a.get_weights(0), whole.get_weights(0)) and same(b.get_weights(0), whole.get_weights(1))
    train_split(whole, [(a, [0], [(0, 32)]), (b, [1], [(32, 32)])], specs)
    assert same(a.get_weights(0), whole.get_weights(0))
    assert same(b.get_weights(0), whole.get_weights(1))


@pytest.mark.parametrize("storage", ["fp16", "int8"])
def test_mixed_d_set_split_across_modules(storage):
    # Tables of different D keyed by their first rows in the set (every group then uses the seed as given),
    # placed on two "ranks": {0, 2} and {1, 3}; per-table init ranges.
    specs = [(30, 16), (20, 8), (25, 16), (10, 12)]
    first = [0, 30, 50, 75]
    lows, highs = [-0.1, -0.2, -0.3, -0.4], [0.1, 0.2, 0.3, 0.4]
    whole = module(specs, storage, row_keys=first)
    r0 = module([specs[0], specs[2]], storage, row_keys=[first[0], first[2]])
    r1 = module([specs[1], specs[3]], storage, row_keys=[first[1], first[3]])
    assert [g["seed"] for g in whole.groups()] == [SEED] * 3
    whole.init_uniform(lows, highs)
    r0.init_uniform([lows[0], lows[2]], [highs[0], highs[2]])
    r1.init_uniform(torch.tensor([lows[1], lows[3]]), (highs[1], highs[3]))
    for m, tables in ((r0, [0, 2]), (r1, [1, 3])):
        for j, t in enumerate(tables):
            assert same(m.get_weights(j), whole.get_weights(t)), t
    cols = [0, 16, 24, 40]
    train_split(whole, [(r0, [0, 2], [(cols[0], 16), (cols[2], 16)]), (r1, [1, 3], [(cols[1], 8), (cols[3], 12)])],
                specs)
    for m, tables in ((r0, [0, 2]), (r1, [1, 3])):
        for j, t in enumerate(tables):
            assert same(m.get_weights(j), whole.get_weights(t)), t


def test_init_uniform_per_table():
    specs = [(70, 16), (5, 8), (9, 16)]
    a = module(specs, "int8", cache="lru", cache_fraction=0.5)
    b = module(specs, "int8", cache="lru", cache_fraction=0.5)
    a.init_uniform(-0.3, 0.7)
    b.init_uniform([-0.3] * 3, 0.7)  # a number with a sequence: every table
    for t in range(3):
        assert same(a.get_weights(t), b.get_weights(t))
    b.init_uniform([-0.3, -1.0, -0.3], [0.7, 2.0, 0.7])
    c = module(specs, "int8")
    c.init_uniform(-1.0, 2.0)
    assert same(b.get_weights(0), a.get_weights(0)) and same(b.get_weights(2), a.get_weights(2))
    assert same(b.get_weights(1), c.get_weights(1))


def test_keys_are_recorded_in_the_extra_state():
    m = module([(4, 8), (5, 12)], "fp16", row_keys=[10, 14], column_keys=(0, 4))
    extra = m.state_dict()["_extra_state"]["config"]
    assert extra["row_keys"] == [10, 14] and extra["column_keys"] == [0, 4]
    n = module([(4, 8), (5, 12)], "fp16")
    assert n.get_extra_state()["config"]["row_keys"] is None
    n.load_state_dict(m.state_dict())  # keys are configuration: not compared


def test_argument_errors():
    specs = [(4, 8), (5, 12)]
    with pytest.raises(ValueError, match=r"row_keys = \[0\] has 1 entries.*T = 2"):
        module(specs, "fp32", row_keys=[0])
    with pytest.raises(ValueError, match=r"column_keys = \[0, 4, 8\] has 3 entries"):
        module(specs, "fp32", column_keys=[0, 4, 8])
    with pytest.raises(TypeError, match=r"row_keys\[1\] = 1.5 must be an integer"):
        module(specs, "fp32", row_keys=[0, 1.5])
    with pytest.raises(TypeError, match=r"column_keys\[0\] = True must be an integer"):
        module(specs, "fp32", column_keys=[True, 0])
    with pytest.raises(TypeError, match=r"row_keys = '01' must be a sequence of 2 integers"):
        module(specs, "fp32", row_keys="01")
    with pytest.raises(TypeError, match=r"column_keys = 4 must be a sequence"):
        module(specs, "fp32", column_keys=4)
    with pytest.raises(ValueError, match=r"row_keys\[0\] = -1 is outside"):
        module(specs, "fp32", row_keys=[-1, 0])
    with pytest.raises(ValueError, match=r"row_keys\[1\] = 9223372036854775808 is outside"):
        module(specs, "fp32", row_keys=[0, 2**63])
    with pytest.raises(ValueError, match=r"config.column_keys\[1\] = 6"):
        module(specs, "fp32", column_keys=[0, 6])
    with pytest.raises(ValueError, match=r"config.row_keys\[1\] = 9223372036854775807"):
        module(specs, "fp32", row_keys=[0, 2**63 - 1])  # no room for the table's rows
    m = module(specs, "fp16")
    m.init_uniform(-1, 1)
    w = [m.get_weights(t) for t in range(2)]
    with pytest.raises(ValueError, match=r"low = \[-1\] has 1 values.*T = 2"):
        m.init_uniform([-1], 1)
    with pytest.raises(ValueError, match=r"high = \(1, 2, 3\) has 3 values"):
        m.init_uniform(-1, (1, 2, 3))
    with pytest.raises(TypeError, match=r"high\[1\] = '2' must be a real number"):
        m.init_uniform([-1, -1], [1, "2"])
    with pytest.raises(ValueError, match=r"table 1.*\[1, 0\.5\)"):
        m.init_uniform([-1, 1], [1, 0.5])
    with pytest.raises(ValueError, match=r"table 0.*65504"):
        m.init_uniform([-1e6, -1], [1, 1])
    with pytest.raises(ValueError, match=r"low\[0\] = 1e\+300 is outside float32's range"):
        m.init_uniform([1e300, -1], [1, 1])
    assert all(same(m.get_weights(t), w[t]) for t in range(2))  # nothing changed
