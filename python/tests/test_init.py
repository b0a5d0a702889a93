# SPDX-License-Identifier: Apache-2.0
"""Initial weights: ``weights_init`` (default ``"uniform"``: each table U(-sqrt(1/rows),
sqrt(1/rows)), TorchRec's default for an EmbeddingBagConfig), drawn at construction by mpe's
init_uniform from the seed.

Bounds are exact for fp32 (float32(sqrt(1/rows)) is the range's end and a draw stays below it);
another storage rounds each drawn value to its format, which may step past the end by at most
the format's resolution there (TOLERANCE, per storage, and its reason). Moments: the weights
of one table are U(-b, b) draws, mean 0 and variance b^2/3; their sample mean and variance are
checked to 6 standard errors (b / sqrt(3n) and sqrt(4/45) b^2 / sqrt(n) for n draws), far
wider than a correct draw strays (probability < 1e-8 for any seed) and far narrower than a wrong
range (b twice as large moves the variance by 300 %, i.e. hundreds of standard errors here).
"""
import math

import pytest
import torch

import mpe_torch

# Three D-groups (D = 16, 8, 4: groups past the first draw from a seed derived from `seed`)
# and tables of very different row counts, so each table's range is its own.
SPECS = [(5000, 16), (300, 8), (20000, 4), (7, 16)]

# How far past the range's end a stored weight may read, relative to the end b:
TOLERANCE = {
    "fp32": 0.0,            # the draw itself: in [-b, b)
    "fp16": 2.0 ** -10,     # rounded (stochastically) to fp16: one ulp at b is <= 2^-10 b
    "bf16": 2.0 ** -7,      # one bf16 ulp at b is <= 2^-7 b
    "int8": 1e-6,           # f32 scale and bias from the row's min and max: a few f32 ulps
    "int4": 2.0 ** -8,      # f16 scale and bias (2^-11 relative each) times up to 15 steps
    "int2": 2.0 ** -8,      # as int4, 3 steps
    "fp8_e4m3": 1e-6,       # f32 scale = max|x| / 448: the row's largest |x| decodes to itself
    "fp8_e5m2": 1e-6,       # f32 scale = max|x| / 57344: likewise
}


def bound(rows):
    return torch.tensor(math.sqrt(1.0 / rows), dtype=torch.float32).item()  # as mpe gets it


def weights(m):
    return [m.get_weights(t) for t in range(m.num_tables)]


def test_tolerance_names_every_storage():
    assert sorted(TOLERANCE) == sorted(mpe_torch.STORAGES)


def test_default_is_torchrec_uniform_per_table():
    m = mpe_torch.TableBatchedEmbeddingBags(SPECS, seed=7)
    for t, (rows, D) in enumerate(SPECS):
        w, b = m.get_weights(t).double(), bound(rows)
        assert w.abs().max().item() <= b, (t, w.abs().max().item(), b)
        assert (w != 0).any(), t
        n = rows * D
        if n < 4000:  # too few draws for moments: only the range (7 x 16 = 112 weights)
            continue
        # Spread over the whole range: a draw misses the top (bottom) 0.5 % of it with probability
        # 0.995, all n >= 4000 of them with 0.995^4000 < 1e-8.
        assert w.min().item() < -0.99 * b and w.max().item() > 0.99 * b, t
        assert abs(w.mean().item()) < 6 * b / math.sqrt(3 * n), (t, w.mean().item())
        var = w.var().item()
        assert abs(var - b * b / 3) < 6 * math.sqrt(4 / 45) * b * b / math.sqrt(n), (t, var, b * b / 3)


@pytest.mark.parametrize("storage", mpe_torch.STORAGES)
def test_default_range_every_storage(storage):
    m = mpe_torch.TableBatchedEmbeddingBags(SPECS, storage=storage, seed=7)
    for t, (rows, _) in enumerate(SPECS):
        w, b = m.get_weights(t), bound(rows)
        assert w.abs().max().item() <= b * (1 + TOLERANCE[storage]), (storage, t, w.abs().max().item(), b)
        assert (w != 0).any(), (storage, t)


def test_default_draws_init_uniform_per_table():
    # The default is mpe's own init_uniform with one range per table (the Philox stream of the
    # seed): the same bits as a zero module initialised explicitly.
    a = mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="int8", seed=3)
    b = mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="int8", seed=3, weights_init="zeros")
    b.init_uniform([-math.sqrt(1 / r) for r, _ in SPECS], [math.sqrt(1 / r) for r, _ in SPECS])
    for x, y in zip(weights(a), weights(b)):
        assert torch.equal(x, y)
    assert torch.equal(a.state_dict()["mpe_state"], b.state_dict()["mpe_state"])


def test_same_seed_same_bits_any_thread_count():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="fp16", seed=42)
        torch.set_num_threads(2)
        two = mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="fp16", seed=42)
    finally:
        torch.set_num_threads(threads)
    for x, y in zip(weights(one), weights(two)):
        assert torch.equal(x, y)


def test_different_seed_different_weights():
    a = weights(mpe_torch.TableBatchedEmbeddingBags(SPECS, seed=1))
    b = weights(mpe_torch.TableBatchedEmbeddingBags(SPECS, seed=2))
    for x, y in zip(a, b):
        assert not torch.equal(x, y)
        assert (x != y).float().mean().item() > 0.99  # nearly every weight differs, not a few


@pytest.mark.parametrize("storage", mpe_torch.STORAGES)
def test_zeros(storage):
    m = mpe_torch.TableBatchedEmbeddingBags(SPECS, storage=storage, seed=7, weights_init="ZEROS")
    for w in weights(m):
        assert torch.equal(w, torch.zeros_like(w))


def test_ranges_are_init_uniform():
    one = mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="bf16", seed=9, weights_init=(-0.25, 0.5))
    ref = mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="bf16", seed=9, weights_init="zeros")
    ref.init_uniform(-0.25, 0.5)
    for x, y in zip(weights(one), weights(ref)):
        assert torch.equal(x, y)
        assert x.min().item() >= -0.25 and x.max().item() <= 0.5 * (1 + TOLERANCE["bf16"])

    ranges = [(-1.0, 1.0), (0.0, 0.125), (-0.5, -0.25), (-3.0, 2.0)]
    per = mpe_torch.TableBatchedEmbeddingBags(SPECS, seed=9, weights_init=ranges)
    as_tensor = mpe_torch.TableBatchedEmbeddingBags(SPECS, seed=9, weights_init=torch.tensor(ranges))
    ref = mpe_torch.TableBatchedEmbeddingBags(SPECS, seed=9, weights_init="zeros")
    ref.init_uniform([lo for lo, _ in ranges], [hi for _, hi in ranges])
    for t, (x, y, z) in enumerate(zip(weights(per), weights(as_tensor), weights(ref))):
        assert torch.equal(x, z) and torch.equal(y, z)
        assert x.min().item() >= ranges[t][0] and x.max().item() < ranges[t][1]


def test_row_keys_give_the_whole_sets_default_bits():
    # A table placed alone by table-wise sharding (row_keys: its first row in the set) starts
    # with the bits it has in the whole set: its range comes from its own rows, the same there.
    specs = [(100, 8), (57, 8), (200, 8)]
    whole = mpe_torch.TableBatchedEmbeddingBags(specs, seed=11)
    part = mpe_torch.TableBatchedEmbeddingBags([specs[1]], seed=11, row_keys=[100])
    assert torch.equal(part.get_weights(0), whole.get_weights(1))


@pytest.mark.parametrize("value, shown", [
    ("gauss", "'gauss'"), (None, "None"), (0.1, "0.1"), ((0.1,), r"\(0.1,\)"), ((-1, 0, 1), r"\(-1, 0, 1\)"),
    ((-1, "1"), r"\(-1, '1'\)"), (True, "True"), ([(-1, 1)] * 3, r"\[\(-1, 1\), \(-1, 1\), \(-1, 1\)\]"),
    ([(-1, 1), 2, (0, 1), (0, 1)], r"\[\(-1, 1\), 2, "),
])
def test_bad_weights_init_is_a_value_error_naming_it(value, shown):
    with pytest.raises(ValueError, match=r"weights_init = " + shown):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, weights_init=value)


@pytest.mark.parametrize("value, storage, why", [
    ((0.5, -0.5), "fp32", r"\(0.5, -0.5\): .*\[0.5, -0.5\) must be finite, non-empty"),
    ((float("nan"), 1.0), "fp32", r"\(nan, 1.0\): .*must be finite"),
    ([(-1, 1), (-1, 1), (1, 1), (-1, 1)], "int8", r"\[\(-1, 1\), .*\]: .*table 2"),
    ((-70000.0, 1.0), "fp16", r"\(-70000.0, 1.0\): .*within \+-65504"),
])
def test_a_range_mpe_refuses_names_weights_init(value, storage, why):
    with pytest.raises(ValueError, match=r"weights_init = " + why):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, storage=storage, weights_init=value)
