# SPDX-License-Identifier: Apache-2.0
"""Tiered tables inside TorchRec (``table_options[t]["tiers"]``): DMP over 2 gloo processes
equals one process's TableBatchedEmbeddingBags with an mpe_torch.TieredRows in front of each
tiered table, fed the global batch (torchrec_cases.reference), bit for bit: outputs every step,
every shard's physical rows and every map's exact state. Resume from state_dict and
torch.distributed.checkpoint, a corrupt map state refused on every rank with nothing changed,
the planner's bytes and the errors."""
import os

import pytest
import torch

torchrec = pytest.importorskip("torchrec", reason="torchrec is not installed (python/ci_venv.sh installs it)")

import mpe_torch  # noqa: E402
import mpe_torch.torchrec as mt  # noqa: E402
import torchrec_cases as tc  # noqa: E402
from test_torchrec import (FOUR, SGD, TW, WORLD, _resume_body, assert_resumed, assert_shards_equal,  # noqa: E402
                           joined)

# Small private tiers, fast decays: 20 steps of Zipf-like ids promote, refuse and demote.
T0 = dict(private_rows=8, shared_rows=24, promote_at=2, demote_below=1, decay_every=30)
T2 = dict(private_rows=16, shared_rows=40, promote_at=3, demote_below=2, decay_every=50, seed=7)
TIERS = {"t0": dict(tiers=T0), "t2": dict(tiers=T2)}


def assert_maps_equal(results, ref_tbe, names):
    """Every rank's map of each tiered table (each column-wise shard's too) holds the
    reference map's exact state and counters."""
    seen = 0
    for res in results:
        for name, maps in res["tiers"].items():
            ref = ref_tbe.maps[name]
            for stats, state in maps:
                assert torch.equal(state, ref.get_extra_state()), name
                assert stats == ref.stats(), name
                seen += 1
    assert {n for res in results for n in res["tiers"]} == set(names)
    return seen


def test_table_wise_tiered_tables_equal_one_process(tmp_path):
    variants = [dict(SGD, storage="fp32"), dict(SGD, storage="int8"),
                dict(storage="int4", optimizer="rowwise_adagrad", learning_rate=0.05, seed=3)]
    case = dict(tables=FOUR, batch=4, steps=20, plan=TW, table_options=TIERS, variants=variants)
    results = tc.spawn(tc.train_many_body, case, WORLD, tmp_path)
    for v, options in enumerate(variants):
        outs, weights, ref = tc.reference({**case, "options": options}, WORLD, case["steps"])
        per_rank = [r["variants"][v] for r in results]
        for step in range(case["steps"]):
            assert torch.equal(joined(per_rank, "outs", step), outs[step]), (options, step)
        assert_shards_equal(per_rank, weights)
        assert weights["t0"].shape == (32, 8) and weights["t2"].shape == (56, 8)
        assert assert_maps_equal(per_rank, ref, ("t0", "t2")) == 2
        # The run exercised every transition (else equality would prove little).
        s0, s2 = ref.maps["t0"].stats(), ref.maps["t2"].stats()
        assert s0["promotions"] + s2["promotions"] > 10 and s0["demotions"] + s2["demotions"] > 3
        assert s0["decays"] > 3 and s0["refused_promotions"] + s2["refused_promotions"] > 0
        # Tiered and untiered tables of the same options share rank 0's kernel; tiers_bytes
        # is both maps' TieredRows.memory_bytes().
        assert per_rank[0]["memory"]["tiers_bytes"] == ref.maps["t0"].memory_bytes() + ref.maps["t2"].memory_bytes()
        assert per_rank[1]["memory"]["tiers_bytes"] == 0


def test_column_wise_tiered_table_shards_agree(tmp_path):
    tables = [("t0", 60, 16, ["f0"]), ("t1", 40, 8, ["f1"]), ("t2", 90, 16, ["f2"])]
    plan = {"t0": ("cw", [0, 1]), "t1": ("tw", 1), "t2": ("cw", [1, 0])}
    table_options = {"t0": dict(tiers=dict(T0, private_rows=6)), "t1": dict(tiers=dict(T2, shared_rows=10))}
    case = dict(tables=tables, batch=3, steps=20, plan=plan, table_options=table_options,
                variants=[dict(SGD, storage="fp32"), dict(SGD, storage="bf16")])
    results = tc.spawn(tc.train_many_body, case, WORLD, tmp_path)
    for v, options in enumerate(case["variants"]):
        outs, weights, ref = tc.reference({**case, "options": options}, WORLD, case["steps"])
        per_rank = [r["variants"][v] for r in results]
        for step in range(case["steps"]):
            assert torch.equal(joined(per_rank, "outs", step), outs[step]), (options, step)
        assert_shards_equal(per_rank, weights)
        # t0's two column shards (one a rank) each map the same ids: 2 maps + t1's.
        assert assert_maps_equal(per_rank, ref, ("t0", "t1")) == 3
        assert ref.maps["t0"].stats()["promotions"] > 5


def test_tiered_resume_from_state_dict_and_dcp(tmp_path):
    options = dict(storage="int4", optimizer="rowwise_adagrad", learning_rate=0.05, seed=2, cache="lru",
                   cache_fraction=0.3)
    case = dict(tables=FOUR, batch=4, steps=12, plan=TW, options=options, table_options=TIERS, dir=str(tmp_path))
    results = tc.spawn(_resume_body, case, WORLD, tmp_path)
    assert_resumed(results, case["steps"])
    # The state dict's weight of a tiered table is its (P + S, D) physical rows, whatever its
    # ids (after 6 steps: the reference's rows, with rank 0's kernel caching as DMP's: t0 and t2
    # share one kernel there, so the reference is those two tables, keyed as DMP keys them).
    half = tc.reference({**case, "tables": [FOUR[0], FOUR[2]]}, WORLD, case["steps"] // 2, keys=[0, 32 + 57])
    for name in ("t0", "t2"):
        full = results[0]["readable"][f"embedding_bags.{name}.weight"]
        assert torch.equal(full, half[1][name]), name
    assert results[0]["readable"]["embedding_bags.t0.weight"].shape == (32, 8)
    assert results[0]["readable"]["embedding_bags.t1.weight"].shape == (57, 8)
    # MpeEmbeddingBag.logical_weights(): (ids, D), id i's row of its map.
    m = half[2].maps["t0"]
    assert torch.equal(results[0]["logical"]["t0"], half[1]["t0"][m.lookup(torch.arange(100))])


def _corrupt_body(rank, world, case):
    first = tc.build_dmp(case, world)
    tc.train_steps(first, case, rank, world, 4)
    sd = first.state_dict()
    second = tc.build_dmp(case, world)
    tc.train_steps(second, case, rank, world, 2)
    sharded = tc.sharded_module(second)

    def snapshot():
        return (tc.local_weights(second),
                {n: [m.get_extra_state() for m in ms] for n, ms in sharded.tiers().items()})

    out = {}
    for how in ("flipped", "missing", "foreign"):
        bad = dict(sd)
        keys = sorted(k for k in bad if ".tiers" in k)
        if rank == 0:  # only rank 0's map state is bad: rank 1 must refuse too
            if how == "flipped":
                raw = bytearray(bad[keys[0]])
                raw[len(raw) // 2] ^= 0x10
                bad[keys[0]] = bytes(raw)
            elif how == "missing":
                del bad[keys[-1]]
            else:  # t0's map bytes where t2's belong: another configuration
                bad[keys[-1]] = bad[keys[0]]
        before = snapshot()
        try:
            second.load_state_dict(bad)
            out[how] = None
        except Exception as e:  # noqa: BLE001 - the type is checked by the test
            out[how] = f"{type(e).__name__}: {e}"
        after = snapshot()
        out[how + "_unchanged"] = all(torch.equal(a[2], b[2]) for n in before[0]
                                      for a, b in zip(before[0][n], after[0][n])) and all(
            torch.equal(a, b) for n in before[1] for a, b in zip(before[1][n], after[1][n]))
    second.load_state_dict(sd)  # the good state still loads
    out["loaded"] = {n: [m.get_extra_state() for m in ms] for n, ms in sharded.tiers().items()}
    out["saved"] = {n: [m.get_extra_state() for m in ms] for n, ms in tc.sharded_module(first).tiers().items()}
    return out


def test_corrupt_map_state_refused_on_every_rank(tmp_path):
    case = dict(tables=FOUR, batch=4, plan=TW, options=dict(SGD, storage="int8"), table_options=TIERS)
    results = tc.spawn(_corrupt_body, case, WORLD, tmp_path)
    r0, r1 = results
    assert r0["flipped"].startswith("CheckpointError") and ".tiers0" in r0["flipped"], r0["flipped"]
    assert "CRC" in r0["flipped"] or "crc" in r0["flipped"].lower(), r0["flipped"]
    assert r0["missing"].startswith("ValueError") and "lacks" in r0["missing"] and ".tiers1" in r0["missing"]
    assert r0["foreign"].startswith("CheckpointError"), r0["foreign"]
    for how in ("flipped", "missing", "foreign"):
        assert r1[how].startswith("RuntimeError") and "another rank" in r1[how], r1[how]
        assert r0[how + "_unchanged"] and r1[how + "_unchanged"], how
    for name in r0["saved"]:
        assert all(torch.equal(a, b) for a, b in zip(r0["saved"][name], r0["loaded"][name]))


def _eval_body(rank, world, case):
    model = tc.build_dmp(case, world)
    tc.train_steps(model, case, rank, world, 5)
    sharded = tc.sharded_module(model)

    def states():
        return [m.get_extra_state() for _, ms in sorted(sharded.tiers().items()) for m in ms]

    def same(a, b):
        return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))

    before = states()
    model.eval()
    with torch.no_grad():
        kt = model(tc.local_kjt(case, 5, rank, world))
    out = dict(eval_out=torch.cat([kt[f] for f in tc.features(case)], dim=1), eval_unchanged=same(before, states()))
    # An id outside its table (rank 0: f0 -> t0, tiered, its own; rank 1: f1 -> t1, untiered,
    # sharing rank 1's kernel with tiered t3) is refused naming the feature, the table and the
    # value, before any map of the kernel counts the batch. Both owners refuse, so neither
    # rank waits in the output all-to-all.
    model.train()
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    kjt = tc.local_kjt(case, 6, rank, world)
    values, lengths = kjt.values().clone(), kjt.lengths().clone()
    f, bad_id = (0, 100) if rank == 0 else (1, 57)
    first = int(lengths[:f * case["batch"]].sum())
    values = torch.cat([values[:first], torch.tensor([bad_id]), values[first:]])
    lengths[f * case["batch"]] += 1
    bad = KeyedJaggedTensor.from_lengths_sync(keys=kjt.keys(), values=values, lengths=lengths)
    before = states()
    try:
        model(bad)
        out["refusal"] = None
    except Exception as e:  # noqa: BLE001 - the type is checked by the test
        out["refusal"] = f"{type(e).__name__}: {e}"
    out["refusal_unchanged"] = same(before, states())
    return out


def test_eval_looks_up_and_bad_ids_change_no_map(tmp_path):
    table_options = {"t0": dict(tiers=T0), "t3": dict(tiers=dict(T0, private_rows=4, shared_rows=9))}
    case = dict(tables=FOUR, batch=4, plan=TW, options=dict(SGD, storage="fp32"), table_options=table_options)
    results = tc.spawn(_eval_body, case, WORLD, tmp_path)
    # The evaluation reads each id's physical row from the trained state and counts nothing:
    # the reference after 5 steps, looked up (no_grad) on step 5's global batch.
    _, _, ref = tc.reference(case, WORLD, 5)
    bags, _ = tc.global_batch(case, 5, WORLD)
    per_table = [torch.cat(fb) for fb in bags]
    with torch.no_grad():
        for t, name in ((0, "t0"), (3, "t3")):
            per_table[t] = ref.maps[name](per_table[t])
        lengths = torch.tensor([len(b) for fb in bags for b in fb])
        expect = ref(torch.cat(per_table), torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]))
    assert torch.equal(torch.cat([r["eval_out"] for r in results]), expect)
    assert all(r["eval_unchanged"] and r["refusal_unchanged"] for r in results)
    assert results[0]["refusal"].startswith("IndexError"), results[0]["refusal"]
    assert "feature 'f0' of table 't0' has id 100" in results[0]["refusal"] and "[0, 100)" in results[0]["refusal"]
    assert "feature 'f1' of table 't1' has id 57" in results[1]["refusal"] and "[0, 57)" in results[1]["refusal"]


def test_tiers_option_errors():
    with pytest.raises(ValueError, match="fused_params sets tiers.*table_options"):
        mt.EmbeddingBagCollectionSharder(fused_params=dict(tiers=T0))
    with pytest.raises(ValueError, match=r"table_options\['t0'\]\['tiers'\] has unknown field\(s\) 'ids'"):
        mt.EmbeddingBagCollectionSharder(table_options={"t0": dict(tiers=dict(T0, ids=100))})
    with pytest.raises(ValueError, match=r"\['tiers'\] lacks shared_rows"):
        mt.EmbeddingBagCollectionSharder(table_options={"t0": dict(tiers=dict(private_rows=4))})
    with pytest.raises(TypeError, match=r"\['tiers'\]\['promote_at'\] = 2.5 must be an integer"):
        mt.EmbeddingBagCollectionSharder(table_options={"t0": dict(tiers=dict(T0, promote_at=2.5))})
    with pytest.raises(TypeError, match=r"\['tiers'\] must be a dict"):
        mt.EmbeddingBagCollectionSharder(table_options={"t0": dict(tiers=[8, 24])})
    s = mt.EmbeddingBagCollectionSharder(table_options={"t0": dict(storage="int8", tiers=T0)})
    assert s.tiers("t0") == T0 and s.tiers("t1") is None and "tiers" not in s.options("t0")
    # None: not tiered (as tiers() reports an untiered table).
    s2 = mt.EmbeddingBagCollectionSharder(fused_params=dict(tiers=None), table_options={"t0": dict(tiers=None)})
    assert s2.tiers("t0") is None and s2.options("t0") == {}
    # Sizes are checked against the table's ids when DMP shards, naming the table.
    configs = [torchrec.EmbeddingBagConfig(name="t0", embedding_dim=8, num_embeddings=6, feature_names=["f0"])]
    ebc = torchrec.EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    plan = mt.sharding_plan(ebc, {"t0": mt.table_wise(0)}, s, 1)
    with pytest.raises(ValueError, match=r"table_options\['t0'\]\['tiers'\] for its 6 ids: .*private_rows = 8"):
        s.shard(ebc, plan.plan[""], env=None)
    # More physical rows than ids: refused (the untiered table is smaller).
    s3 = mt.EmbeddingBagCollectionSharder(table_options={"t0": dict(tiers=dict(private_rows=2, shared_rows=5))})
    with pytest.raises(ValueError, match=r"private_rows \+ shared_rows = 7 rows, more than the table's 6 ids"):
        s3.shard(ebc, plan.plan[""], env=None)


def test_planner_counts_physical_rows_and_the_map():
    opts = dict(storage="int8", cache="lru", cache_fraction=0.05)
    tiers = dict(private_rows=1000, shared_rows=9000)
    plain = mt.shard_bytes(10_000, 64, opts)
    # A 10^6-id table tiered into 10,000 rows costs what a 10,000-row table does, plus its map.
    m = mpe_torch.TieredRows(ids=1_000_000, **tiers)
    assert mt.shard_bytes(1_000_000, 64, opts, tiers=tiers) == plain + m.memory_bytes()
    assert m.memory_bytes() == 4096 + 12 * 1000 + 4 * 2048
    for p, w in ((0, 0), (1, 0), (64, 0), (65, 0), (1000, 1 << 12), (3, 256)):
        m = mpe_torch.TieredRows(ids=10_000, private_rows=p, shared_rows=5, sketch_width=w)
        assert mt.shard_storage(10_000, 8, opts, tiers=m.config)[1] == (
            mt.shard_bytes(p + 5, 8, opts) + m.memory_bytes()), (p, w)
    # shard_bytes / shard_storage check the tiers as the sharder does (naming the field).
    for bad, err, pattern in ((dict(private_rows=-10, shared_rows=5), ValueError, "private_rows = -10"),
                              (dict(private_rows=5000, shared_rows=5), ValueError, "private_rows = 5000"),
                              (dict(private_rows=8, shared_rows=0), ValueError, "shared_rows = 0"),
                              (dict(private_rows=8, shared_rows=9990), ValueError, "9998 rows, more than"),
                              (dict(private_rows=8, shared_rows=True), TypeError, "must be an integer"),
                              (dict(private_rows=8, shared_rows=10.7), TypeError, "must be an integer"),
                              (dict(private_rows=8, shared_rows=5, promote_at=0), ValueError, "promote_at = 0"),
                              (dict(private_rows=8, shared_rows=5, color=1), ValueError, "unknown field"),
                              (dict(private_rows=8, shared_rows=5, ids=7), ValueError, "ids = 7"),
                              (dict(private_rows=8), ValueError, "lacks shared_rows"),
                              ("p8s5", TypeError, "must be a dict")):
        with pytest.raises(err, match=pattern):
            mt.shard_bytes(1000, 8, opts, tiers=bad)
    # On CUDA the map is host memory (DDR) whatever the store's placement.
    hbm, ddr = mt.shard_storage(1_000_000, 64, opts, compute_device="cuda", tiers=tiers)
    assert ddr == mpe_torch.TieredRows(ids=1_000_000, **tiers).memory_bytes() and hbm + ddr == \
        mt.shard_bytes(1_000_000, 64, opts, tiers=tiers)
    # The planner's shard estimate uses them.
    sharder = mt.EmbeddingBagCollectionSharder(fused_params=opts, table_options={"big": dict(tiers=tiers)})
    configs = [torchrec.EmbeddingBagConfig(name="big", embedding_dim=64, num_embeddings=1_000_000,
                                           feature_names=["f"])]
    ebc = torchrec.EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    est = [o for o in mt.planner(1, sharder)._enumerator.enumerate(module=ebc, sharders=[sharder])
           if o.sharding_type == "table_wise"][0]
    untiered = mt.EmbeddingBagCollectionSharder(fused_params=opts)
    est_plain = [o for o in mt.planner(1, untiered)._enumerator.enumerate(module=ebc, sharders=[untiered])
                 if o.sharding_type == "table_wise"][0]
    assert est_plain.shards[0].storage.ddr - est.shards[0].storage.ddr == (
        mt.shard_bytes(1_000_000, 64, opts) - mt.shard_bytes(1_000_000, 64, opts, tiers=tiers))


def _two_feature_body(rank, world, case):
    model = tc.build_dmp(case, world)
    sharded = tc.sharded_module(model)
    first = None
    states = []
    for step in range(case["steps"]):
        kt = model(tc.local_kjt(case, step, rank, world))
        out = torch.cat([kt[f] for f in tc.features(case)], dim=1)
        first = out.detach().clone() if first is None else first
        out.sum().backward()
        states.append(sharded.tiers()["t1"][0].get_extra_state())
    return dict(first=first, states=states, init=tc.local_weights(tc.build_dmp(case, world)))


def test_a_table_read_by_two_features_maps_their_ids_together(tmp_path):
    # t1 is read by f1 and f3: each batch is one map() over both features' ids (f1's then f3's).
    tables = [("t0", 100, 8, ["f0"]), ("t1", 57, 4, ["f1", "f3"])]
    tiers = dict(private_rows=6, shared_rows=11, promote_at=1, demote_below=1, decay_every=25)
    case = dict(tables=tables, batch=4, steps=6, plan={"t0": ("tw", 0), "t1": ("tw", 0)},
                options=dict(storage="fp32", optimizer="sgd", learning_rate=0.1, seed=3),
                table_options={"t1": dict(tiers=tiers)})
    res = tc.spawn(_two_feature_body, case, 1, tmp_path)[0]
    ref = mpe_torch.TieredRows(ids=57, **tiers)
    shared_of = mpe_torch.TieredRows(ids=57, **tiers)  # never maps: every id at its shared row
    init = res["init"]["t1"][0][2]  # (17, 4): t1's physical rows before training
    for step in range(case["steps"]):
        bags, _ = tc.global_batch(case, step, 1)
        ref(torch.cat([torch.cat(bags[1]), torch.cat(bags[2])]))
        assert torch.equal(res["states"][step], ref.get_extra_state()), step
        if step == 0:
            # promote_at = 1: the first batch promotes its 6 lowest ids. A private row starts as
            # a copy of its id's shared row, so every bag pools the initial weights of its
            # ids' shared rows.
            assert ref.stats()["promotions"] == 6 and ref.stats()["refused_promotions"] > 0
            for f, col in ((1, 8), (2, 12)):  # f1's and f3's columns of (B, 8 + 4 + 4)
                for b, bag in enumerate(bags[f]):
                    expect = init[shared_of.lookup(bag)].sum(0) if len(bag) else torch.zeros(4)
                    # Tolerance: torch's sum may add a bag's rows in another order than mpe's
                    # left-to-right fp32 sum (one ulp-scale bound, as the VBE test).
                    torch.testing.assert_close(res["first"][b, col:col + 4], expect, rtol=1e-6, atol=1e-6)
    assert ref.stats()["demotions"] > 0


def _other_tiers_body(rank, world, case):
    tiered = tc.build_dmp(case, world)
    tc.train_steps(tiered, case, rank, world, 2)
    sd = tiered.state_dict()
    out = {}
    t3 = case["table_options"]["t3"]["tiers"]
    others = {"untiered": {}, "other_seed": {"t3": dict(tiers=dict(t3, seed=5))}}
    for how, table_options in others.items():
        model = tc.build_dmp(dict(case, table_options=table_options), world)
        before = tc.local_weights(model)
        try:
            model.load_state_dict(sd)
            out[how] = None
        except ValueError as e:
            out[how] = str(e)
        after = tc.local_weights(model)
        out[how + "_unchanged"] = all(torch.equal(a[2], b[2]) for n in before for a, b in zip(before[n], after[n]))
    return out


def test_a_state_loads_only_into_the_same_tiers(tmp_path):
    # t3's tiers keep its row count (4 + 27 = its 31 ids): only the plan's tiers tell the
    # states apart, and they refuse it, naming both, on every rank.
    tiers = dict(private_rows=4, shared_rows=27, promote_at=2)
    case = dict(tables=FOUR, batch=4, plan=TW, options=dict(SGD, storage="fp32"),
                table_options={"t3": dict(tiers=tiers)})
    for res in tc.spawn(_other_tiers_body, case, WORLD, tmp_path):
        for how in ("untiered", "other_seed"):
            assert res[how] is not None and "tiers" in res[how] and res[how + "_unchanged"], how
            assert "t3: table_wise on ranks [1] tiered (4 private + 27 shared rows of 31 ids, promote_at 2" in res[how]
        assert "seed 5)" in res["other_seed"] and "seed 0)" in res["other_seed"]
