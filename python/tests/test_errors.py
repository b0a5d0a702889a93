# SPDX-License-Identifier: Apache-2.0
"""Bad tensors and bad names raise, with clear messages; nothing is converted silently."""
import itertools

import pytest
import torch

import mpe_torch

SPECS = [(10, 4), (6, 4)]


@pytest.fixture
def m():
    mod = mpe_torch.TableBatchedEmbeddingBags(SPECS)
    mod.init_uniform(-1, 1)
    return mod


def ok():
    return torch.tensor([1, 2, 3, 0], dtype=torch.int64), torch.tensor([0, 2, 3, 3, 4], dtype=torch.int64)


def test_dtype(m):
    idx, off = ok()
    with pytest.raises(TypeError, match="indices must have dtype torch.int64, got torch.int32"):
        m(idx.int(), off)
    with pytest.raises(TypeError, match="offsets must have dtype torch.int64, got torch.float32"):
        m(idx, off.float())
    with pytest.raises(TypeError, match="per_sample_weights must have dtype torch.float32, got torch.float64"):
        m(idx, off, torch.ones(4, dtype=torch.float64))
    with pytest.raises(TypeError, match="weights must have dtype torch.float32"):
        m.set_weights(0, torch.zeros(10, 4, dtype=torch.float16))
    with pytest.raises(TypeError, match="data must have dtype torch.uint8"):
        m.import_table(0, torch.zeros(10, 16, dtype=torch.int8))


def test_device(m):
    idx, off = ok()
    with pytest.raises(ValueError, match="must be on the CPU.*meta"):
        m(idx.to("meta"), off)
    with pytest.raises(ValueError, match="must be on the CPU"):
        m.set_weights(0, torch.zeros(10, 4, device="meta"))


def test_shape_and_contiguity(m):
    idx, off = ok()
    with pytest.raises(ValueError, match="indices must have 1 dimension, got shape \\(2, 2\\)"):
        m(idx.view(2, 2), off)
    with pytest.raises(ValueError, match="must be contiguous"):
        m((torch.arange(8, dtype=torch.int64) % 6)[::2], off)
    with pytest.raises(ValueError, match="offsets has 4 elements; it must have T\\*B \\+ 1 with T = 2"):
        m(idx, off[:4])
    with pytest.raises(ValueError, match="per_sample_weights must not require grad"):
        m(idx, off, torch.ones(4, requires_grad=True))
    with pytest.raises(ValueError, match="per_sample_weights has 3 elements but indices has 4"):
        m(idx, off, torch.ones(3))
    with pytest.raises(ValueError, match="weights has shape \\(10, 5\\), table 0 is \\(10, 4\\)"):
        m.set_weights(0, torch.zeros(10, 5))
    with pytest.raises(ValueError, match="expected \\(10, 12\\)"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="int8").import_table(0, torch.zeros(10, 11, dtype=torch.uint8))
    with pytest.raises(IndexError, match="table = 2 is outside \\[0, 2\\)"):
        m.get_weights(2)


def test_mpe_input_messages(m):
    idx, off = ok()
    bad = idx.clone()
    bad[3] = 6
    with pytest.raises(ValueError, match="indices\\[3\\] = 6 is outside table 1"):
        m(bad, off)
    with pytest.raises(ValueError, match="offsets"):
        m(idx, torch.tensor([0, 3, 2, 3, 4], dtype=torch.int64))
    with pytest.raises(ValueError, match="not finite|non-finite"):
        m(idx, off, torch.tensor([1.0, float("nan"), 1.0, 1.0]))
    mean = mpe_torch.TableBatchedEmbeddingBags(SPECS, pooling_mode="mean")
    with pytest.raises(ValueError, match="pooling_mode 'sum'"):
        mean(idx, off, torch.ones(4))
    with pytest.raises(ValueError, match="cannot be held|not finite|finite"):
        m.set_weights(0, torch.full((10, 4), float("inf")))


def test_names():
    # an unknown name: ValueError listing every valid one (from the extension's variant lists)
    with pytest.raises(ValueError, match="storage = 'bf8' is not one of 'fp32', 'fp16', 'bf16', 'int8', 'int4', 'int2', "
                                         "'fp8_e4m3', 'fp8_e5m2'$"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="bf8")
    with pytest.raises(ValueError, match="cache = 'arc' is not one of 'none', 'lru', 'lfu', 'direct_mapped', "
                                         "'second_touch_lru', 'wtinylfu'$"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, cache="arc", cache_fraction=0.1)
    with pytest.raises(ValueError, match="rounding = 'up' is not one of 'stochastic', 'nearest'$"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, rounding="up")
    with pytest.raises(ValueError, match="state_precision = 'fp8' is not one of 'fp32', 'bf16', 'fp16'$"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, state_precision="fp8")
    with pytest.raises(ValueError, match="optimizer = 'lamb' is not one of 'sgd', 'rowwise_adagrad', 'adagrad', "
                                         "'adam'$"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, optimizer="lamb")
    with pytest.raises(ValueError, match="optimizer = 'lamb' is not one of"):  # with eps given too
        mpe_torch.TableBatchedEmbeddingBags(SPECS, optimizer="lamb", eps=1e-8)
    # known names, a combination not compiled: the message names it, the nearest built ones and
    # where to build it (test_not_built_message_is_short)
    with pytest.raises(ValueError, match=r"bf16/wtinylfu/stochastic/fp32 is not built; nearest built: "
                                         r"bf16/none/stochastic/fp32, bf16/lru/stochastic/fp32, "
                                         r"fp32/wtinylfu/stochastic/fp32 \(all: built_combinations\(\)\); to build "
                                         r"it, allow it in is_built\(\) in python/mpe_torch/csrc/variants.hpp"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="bf16", cache="wtinylfu", cache_fraction=0.5)
    with pytest.raises(ValueError, match="= fp8_e5m2/none/stochastic/bf16 is not built; nearest built: "
                                         "fp8_e5m2/none/stochastic/fp32, fp32/none/stochastic/bf16, "
                                         "int8/none/stochastic/bf16 "):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="fp8_e5m2", state_precision="bf16")
    with pytest.raises(ValueError, match="pooling_mode = 'max'"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, pooling_mode="max")
    with pytest.raises(ValueError, match="cache = 'none' with cache_fraction"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, cache_fraction=0.1)
    with pytest.raises(ValueError, match="Sgd.learning_rate = nan is not finite"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, learning_rate=float("nan"))
    with pytest.raises(ValueError, match="Adam.learning_rate = -0.1 is negative; must be >= 0"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, optimizer="adam", learning_rate=-0.1)
    with pytest.raises(ValueError, match="Adam.beta1 = 1 must be in \\[0, 1\\)"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, optimizer="adam", beta1=1.0)
    with pytest.raises(ValueError, match="rows must be >= 1"):
        mpe_torch.TableBatchedEmbeddingBags([(0, 4)])
    with pytest.raises(TypeError, match="not a \\(rows, D\\) pair"):
        mpe_torch.TableBatchedEmbeddingBags([(10, 4, 1)])
    with pytest.raises(TypeError, match="integers"):
        mpe_torch.TableBatchedEmbeddingBags([(10, 4.0)])
    with pytest.raises(ValueError, match="layout = 'x'"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS).export_table(0, layout="x")
    with pytest.raises(ValueError, match="format = 'int3'"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS).export_table(0, format="int3")
    assert len(mpe_torch.built_combinations()) == len(set(mpe_torch.built_combinations()))


def test_set_learning_rate(m):
    m.set_learning_rate(0.25)
    assert m.get_learning_rate() == 0.25
    with pytest.raises(ValueError, match="Sgd.learning_rate = inf is not finite"):
        m.set_learning_rate(float("inf"))
    with pytest.raises(ValueError, match="Sgd.learning_rate = -0.25 is negative"):
        m.set_learning_rate(-0.25)
    # Neither a string float() would parse nor a bool is a learning rate; a finite value
    # float32 cannot hold is named as given (not as the inf or 0 it would become).
    for bad in ("0.1", True, b"1", torch.tensor([0.1, 0.2]), torch.tensor(True), None):
        with pytest.raises(TypeError, match="mpe_torch: lr = .* must be a real number"):
            m.set_learning_rate(bad)
    with pytest.raises(ValueError, match="lr = 1e\\+39 is outside float32's range"):
        m.set_learning_rate(1e39)
    with pytest.raises(ValueError, match="lr = 1e-50 is outside float32's range"):
        m.set_learning_rate(1e-50)
    assert m.get_learning_rate() == 0.25
    m.set_learning_rate(torch.tensor(0.5, dtype=torch.float64))  # a 0-d real tensor is a number
    assert m.get_learning_rate() == 0.5
    m.set_learning_rate(0)  # an int is a real number; lr 0 is allowed (no update)
    assert m.get_learning_rate() == 0.0


def test_hyperparameters_are_real_numbers():
    import numpy as np
    for field in ("learning_rate", "eps", "beta1", "beta2", "cache_fraction", "max_range_growth"):
        for bad in ("0.5", True, [0.5], np.bool_(True)):
            with pytest.raises(TypeError, match=f"mpe_torch: {field} = .* must be a real number"):
                mpe_torch.TableBatchedEmbeddingBags(SPECS, optimizer="adam", **{field: bad})
    with pytest.raises(ValueError, match="eps = 1e-300 is outside float32's range"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, optimizer="adam", eps=1e-300)
    with pytest.raises(ValueError, match="learning_rate = 1e\\+40 is outside float32's range"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, learning_rate=1e40)
    m = mpe_torch.TableBatchedEmbeddingBags(SPECS, seed=3)
    before = m.get_weights(0).clone()
    for low, high in ((-1e39, 1.0), ("0", 1.0), (0.0, True)):
        with pytest.raises((ValueError, TypeError), match="(low|high) = .*(outside float32's range|real number)"):
            m.init_uniform(low, high)
    assert torch.equal(m.get_weights(0), before)  # nothing changed


def test_backward_misuse(m):
    idx, off = ok()
    out1 = m(idx, off)
    out2 = m(idx, off)
    with pytest.raises(RuntimeError, match="not from the module's last training forward"):
        out1.sum().backward()
    out2.sum().backward()
    assert m.step == 1
    out3 = m(idx, off)
    out3.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="last training forward"):
        out3.sum().backward()
    out4 = m(idx, off)
    with pytest.raises(ValueError, match="grad_output\\[0, 1\\] = nan is not finite|not finite"):
        out4.backward(torch.full((2, 8), float("nan")))
    assert m.step == 2


def test_mixed_group_gradient_nonfinite_all_or_nothing():
    m = mpe_torch.TableBatchedEmbeddingBags([(10, 4), (6, 2)])
    m.init_uniform(-1, 1)
    idx, off = ok()
    w = [m.get_weights(t) for t in range(2)]
    out = m(idx, off)
    g = torch.ones(2, 6)
    g[1, 5] = float("inf")
    with pytest.raises(ValueError, match="grad_output\\[1, 5\\] = inf is not finite"):
        out.backward(g)
    assert all(torch.equal(m.get_weights(t), w[t]) for t in range(2))
    assert m.step == 0


def test_stats_and_memory_dicts():
    m = mpe_torch.TableBatchedEmbeddingBags([(1000, 8), (500, 4)], storage="int8", cache="lru", cache_fraction=0.1)
    idx, off = ok()
    m(idx, off).sum().backward()
    s = m.stats()
    assert s["lookups"] == 4 and s["hits"] + s["misses"] == s["unique_rows"]
    mem = m.memory()
    assert mem["store_bytes"] == 1000 * 16 + 500 * 12
    assert mem["embedding_bytes"] == mem["store_bytes"] + mem["cache_bytes"] + mem["metadata_bytes"]
    assert set(s) >= {"lookups", "hits", "misses", "evictions", "writebacks", "saturated_rows", "skipped_steps"}


@pytest.mark.parametrize("specs", [[(10, 4), (6, 4)], [(10, 4), (6, 8)]], ids=["one_d", "mixed_d"])
@pytest.mark.parametrize("bad", ["index", "weight"])
def test_rejected_forward_keeps_the_pending_backward(specs, bad):
    # A training forward rejected for its input changes nothing: the earlier forward's output
    # still backpropagates, and the module then equals a twin that never saw the bad call.
    def make():
        mod = mpe_torch.TableBatchedEmbeddingBags(specs, storage="int8", cache="lru", cache_fraction=0.5, seed=3)
        mod.init_uniform(-1, 1)
        return mod

    victim, twin = make(), make()
    idx, off = ok()
    psw = torch.tensor([0.5, 1.0, 2.0, 1.5])
    out_v, out_t = victim(idx, off, psw), twin(idx, off, psw)
    if bad == "index":
        with pytest.raises(ValueError, match="indices\\[3\\] = 6"):
            victim(torch.tensor([1, 2, 3, 6]), off)
    else:
        with pytest.raises(ValueError, match="nan"):
            victim(idx, off, torch.tensor([1.0, float("nan"), 1.0, 1.0]))
    g = torch.arange(out_v.numel(), dtype=torch.float32).reshape(out_v.shape) / 7
    out_v.backward(g)
    out_t.backward(g)
    assert victim.step == twin.step == 1
    assert all(torch.equal(victim.get_weights(t), twin.get_weights(t)) for t in range(2))


def test_table_and_seed_must_be_integers(m):
    with pytest.raises(TypeError, match="table = 1.7"):
        m.get_weights(1.7)
    with pytest.raises(TypeError, match="table = True"):
        m.set_weights(True, torch.zeros(6, 4))
    assert torch.equal(m.get_weights(torch.tensor(1)), m.get_weights(1))
    with pytest.raises(ValueError, match="seed = -1 is outside"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, seed=-1)
    with pytest.raises(ValueError, match="seed = 18446744073709551616 is outside"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, seed=2**64)
    with pytest.raises(TypeError, match="seed = 1.5"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, seed=1.5)
    assert mpe_torch.TableBatchedEmbeddingBags(SPECS, seed=2**64 - 1).groups()[0]["seed"] == 2**64 - 1


@pytest.mark.parametrize("kw", [dict(),
                                dict(storage="int8", cache="lru", cache_fraction=0.3, optimizer="adam", learning_rate=0.05),
                                dict(specs=[(10, 4), (6, 8)], storage="int4", optimizer="rowwise_adagrad")],
                         ids=["fp32-sgd", "int8-lru-adam", "int4-two-groups-adagrad"])
@pytest.mark.parametrize("bad", ["grad", "weight", "overflow"])
def test_non_finite_skip_skips_the_whole_step(kw, bad):
    """non_finite="skip": an infinite output gradient, a NaN per-sample weight (which the forward
    then accepts) or a finite gradient whose sum over a row's two occurrences overflows makes
    backward skip the whole step, counted in stats: weights, optimizer state and step stay those
    of a twin that ran the same forwards and no backward for that batch, and training goes on
    identically."""
    kw = dict(kw)
    specs = kw.pop("specs", SPECS)
    total = sum(d for _, d in specs)
    victim, twin = (mpe_torch.TableBatchedEmbeddingBags(specs, non_finite="skip", seed=3, **kw) for _ in range(2))
    for mod in (victim, twin):
        mod.init_uniform(-1, 1)
    idx, off = ok()
    g = torch.linspace(-1, 1, 2 * total).view(2, total)
    for mod in (victim, twin):  # one finite step each
        mod(idx, off).backward(g)
    psw = torch.tensor([1.0, float("nan"), 1.0, 1.0]) if bad == "weight" else torch.ones(4)
    bad_g = g.clone()
    bad_idx = idx
    if bad == "grad":
        bad_g[1, 2] = float("inf")
    elif bad == "overflow":
        bad_idx = torch.tensor([1, 1, 3, 0], dtype=torch.int64)  # table 0, bag 0: row 1 twice
        bad_g = torch.full_like(g, 3e38)
    out_v = victim(bad_idx, off, psw)
    twin(bad_idx, off, psw)  # the same forward, never backpropagated
    assert torch.isnan(out_v).any() == (bad == "weight")
    out_v.backward(bad_g)  # skipped: no exception
    assert victim.stats()["skipped_steps"] == 1 and twin.stats()["skipped_steps"] == 0
    assert victim.step == twin.step == 1
    for mod in (victim, twin):  # training goes on
        mod(idx.flip(0) % 6, off).backward(g * 0.5)
    assert victim.step == twin.step == 2
    for t in range(len(specs)):
        assert torch.equal(victim.get_weights(t), twin.get_weights(t))
    assert torch.equal(victim(idx, off), twin(idx, off))


def test_non_finite_names():
    with pytest.raises(ValueError, match="non_finite = 'ignore' is not one of 'raise', 'skip'"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, non_finite="ignore")
    with pytest.raises(TypeError, match="non_finite must be a string"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, non_finite=True)
    assert "non_finite='skip'" in repr(mpe_torch.TableBatchedEmbeddingBags(SPECS, non_finite="skip"))
    # An eval forward refuses a NaN weight under "skip" too, in the caller's numbering (two
    # D-groups: position 3 is the second group's first occurrence).
    two = mpe_torch.TableBatchedEmbeddingBags([(10, 4), (6, 8)], non_finite="skip").eval()
    idx, off = ok()
    with torch.no_grad(), pytest.raises(ValueError, match=r"forward_inference: per_sample_weights\[3\] = nan"):
        two(idx, off, torch.tensor([1.0, 1.0, 1.0, float("nan")]))
    # "raise" (the default) refuses the same gradient
    m = mpe_torch.TableBatchedEmbeddingBags(SPECS, non_finite="RAISE")
    with pytest.raises(ValueError, match="not finite"):
        m(idx, off).backward(torch.full((2, 8), float("nan")))
    # an overflowing step names the setting that skips it as Python spells it
    over = torch.tensor([1, 1, 3, 0], dtype=torch.int64)  # table 0, bag 0: row 1 twice
    with pytest.raises(ValueError, match='overflows in this step.*non_finite="skip"'):
        m(over, off).backward(torch.full((2, 8), 3e38))


def test_not_built_message_is_short():
    # Every combination of known names that is not compiled: refused by the constructor and by
    # planned_memory with one message naming it, at most 3 nearest built ones (fewest fields
    # changed, its storage kept first) and where to build it, in under 400 characters (the
    # extension's own message lists all 48 built names, ~1,400).
    built = set(mpe_torch.built_combinations())
    seen = 0
    for combo in itertools.product(mpe_torch.STORAGES, mpe_torch.CACHES, mpe_torch.ROUNDINGS,
                                   mpe_torch.STATE_PRECISIONS):
        name = "/".join(combo)
        if name in built:
            continue
        seen += 1
        kw = dict(storage=combo[0], cache=combo[1], cache_fraction=0.0 if combo[1] == "none" else 0.5,
                  rounding=combo[2], state_precision=combo[3])
        with pytest.raises(ValueError) as planned:
            mpe_torch.planned_memory([(10, 4)], **kw)
        msg = str(planned.value)
        assert len(msg) < 400, msg
        assert msg.startswith(f"mpe_torch: storage/cache/rounding/state_precision = {name} is not built; "
                              "nearest built: "), msg
        nearest = msg.split("nearest built: ")[1].split(" (all: built_combinations()); ")[0].split(", ")
        assert 1 <= len(nearest) <= 3 and set(nearest) <= built, msg
        fewest = min(sum(a != b for a, b in zip(combo, c.split("/"))) for c in built)
        assert sum(a != b for a, b in zip(combo, nearest[0].split("/"))) == fewest, msg
        assert "is_built() in python/mpe_torch/csrc/variants.hpp and rebuild" in msg
        if seen % 40 == 1:  # the constructor says the same (a sample: each builds nothing)
            with pytest.raises(ValueError) as made:
                mpe_torch.TableBatchedEmbeddingBags([(10, 4)], **kw)
            assert str(made.value) == msg
    assert seen == len(mpe_torch.STORAGES) * len(mpe_torch.CACHES) * len(mpe_torch.ROUNDINGS) * len(
        mpe_torch.STATE_PRECISIONS) - len(built)
    # Other errors keep their messages and their order: an unknown name lists the valid ones,
    # a bad hyperparameter is named before the combination is looked up.
    with pytest.raises(ValueError, match="storage = 'int3' is not one of"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="int3", cache="lfu", cache_fraction=0.5)
    with pytest.raises(ValueError, match="Sgd.learning_rate = nan is not finite"):
        mpe_torch.TableBatchedEmbeddingBags(SPECS, storage="int4", cache="lfu", cache_fraction=0.5,
                                            learning_rate=float("nan"))


def test_moving_or_converting_the_module_raises():
    emb = mpe_torch.TableBatchedEmbeddingBags([(10, 4)])
    for convert in (lambda m: m.half(), lambda m: m.double(), lambda m: m.bfloat16(),
                    lambda m: m.type(torch.float64),
                    lambda m: m.to_empty(device="meta")):
        with pytest.raises(RuntimeError, match="TableBatchedEmbeddingBags cannot be moved or converted "
                                               r"\(asked for .*\); its tables live in mpe's store"):
            convert(emb)
    # A device move names the device whether or not this machine has one (torch's own error,
    # e.g. "Found no NVIDIA driver", would not say why).
    for device in ("cuda", "xpu", "ipu", "mtia"):
        with pytest.raises(RuntimeError, match=f"TableBatchedEmbeddingBags cannot be moved to {device}: .*CPU only"):
            getattr(emb, device)()
    # .to() names the device or dtype asked for, in every form torch accepts.
    for args, asked in ((("cuda",), "cuda"), ((torch.device("cuda:0"),), "cuda:0"), (("meta",), "meta"),
                        (("cpu", torch.float16), None)):
        with pytest.raises(RuntimeError, match=f"TableBatchedEmbeddingBags cannot be moved to {asked}: .*CPU only"
                           if asked else "TableBatchedEmbeddingBags cannot be converted to torch.float16: "):
            emb.to(*args)
    with pytest.raises(RuntimeError, match="cannot be converted to torch.float64: .*options you want instead"):
        emb.to(dtype=torch.float64)
    # Conversions that leave a CPU float32 module as it is return it.
    assert emb.cpu() is emb and emb.float() is emb and emb.to("cpu") is emb and emb.to(torch.float32) is emb
    torch.testing.assert_close(emb(torch.tensor([1]), torch.tensor([0, 1])), emb.get_weights(0)[1:2])


def test_inputs_must_be_tensors(m):
    idx, off = ok()
    before = m.get_weights(0).clone()
    for args, name in (((idx.tolist(), off), "indices"), ((idx, off.numpy()), "offsets"),
                       ((idx, off, [1.0] * 4), "per_sample_weights")):
        with pytest.raises(TypeError, match=f"{name} must be a torch.Tensor .*; got (list|ndarray)"):
            m(*args)
    assert torch.equal(m.get_weights(0), before)


def test_deepcopy_names_the_way_out(m):
    import copy
    with pytest.raises(TypeError, match="cannot be deep-copied .*state_dict\\(\\)"):
        copy.deepcopy(m)
    shallow = copy.copy(m)  # a shallow copy shares the tables, as nn.Module's does its tensors
    idx, off = ok()
    torch.testing.assert_close(shallow(idx, off), m(idx, off))
