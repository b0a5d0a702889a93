# SPDX-License-Identifier: Apache-2.0
"""mpe inside TorchRec: DistributedModelParallel over 2 gloo processes with mpe's sharder,
checked bit for bit against one process's TableBatchedEmbeddingBags over the whole collection
fed the global batch (torchrec_cases.reference / shard_reference), against nn.EmbeddingBag for
variable batch per feature, and for exact resume from state_dict and
torch.distributed.checkpoint. Every comparison is exact (torch.equal): the same seed and
inputs give the same bits on the same CPU whatever the sharding (docs/numerics.md)."""
import os

import pytest
import torch

torchrec = pytest.importorskip("torchrec", reason="torchrec is not installed (python/ci_venv.sh installs it)")

import mpe_torch  # noqa: E402
import mpe_torch.torchrec as mt  # noqa: E402
import torchrec_cases as tc  # noqa: E402

WORLD = 2
FOUR = [("t0", 100, 8, ["f0"]), ("t1", 57, 8, ["f1"]), ("t2", 200, 8, ["f2"]), ("t3", 31, 8, ["f3"])]
TW = {"t0": ("tw", 0), "t1": ("tw", 1), "t2": ("tw", 0), "t3": ("tw", 1)}
SGD = dict(optimizer="sgd", learning_rate=0.3, seed=11, rounding="stochastic")


def joined(results, key, step):
    return torch.cat([r[key][step] for r in results])


def assert_shards_equal(results, ref_weights):
    """Every rank's shard of every table equals the reference's rows/columns of it."""
    seen = 0
    for res in results:
        for name, shards in res["weights"].items():
            for r0, c0, w in shards:
                ref = ref_weights[name]
                if isinstance(ref, list):  # shard_reference: per piece
                    ref = next(x for (a, b, x) in ref if (a, b) == (r0, c0))
                    assert torch.equal(ref, w), (name, r0, c0)
                else:
                    assert torch.equal(ref[r0:r0 + w.shape[0], c0:c0 + w.shape[1]], w), (name, r0, c0)
                seen += 1
    assert seen >= len(ref_weights)


def test_table_wise_every_storage_equals_one_process(tmp_path):
    storages = mpe_torch.STORAGES
    case = dict(tables=FOUR, batch=4, steps=20, plan=TW,
                variants=[dict(SGD, storage=s) for s in storages] + [dict(SGD, storage="int2", max_range_growth=0.01)])
    results = tc.spawn(tc.train_many_body, case, WORLD, tmp_path)
    for v, options in enumerate(case["variants"]):
        one = {**case, "options": options}
        outs, weights, _ = tc.reference(one, WORLD, case["steps"])
        per_rank = [r["variants"][v] for r in results]
        for step in range(case["steps"]):
            assert torch.equal(joined(per_rank, "outs", step), outs[step]), (options, step)
        assert_shards_equal(per_rank, weights)


def test_column_wise_element_formats_equal_one_process(tmp_path):
    tables = [("t0", 60, 16, ["f0"]), ("t1", 40, 8, ["f1"]), ("t2", 90, 16, ["f2"])]
    plan = {"t0": ("cw", [0, 1]), "t1": ("tw", 1), "t2": ("cw", [1, 0])}
    variants = [dict(SGD, storage=s) for s in ("fp32", "fp16", "bf16")]
    variants.append(dict(storage="fp16", optimizer="adam", learning_rate=0.05, seed=5))
    case = dict(tables=tables, batch=3, steps=20, plan=plan, variants=variants)
    results = tc.spawn(tc.train_many_body, case, WORLD, tmp_path)
    for v, options in enumerate(variants):
        one = {**case, "options": options}
        outs, weights, _ = tc.reference(one, WORLD, case["steps"])
        per_rank = [r["variants"][v] for r in results]
        for step in range(case["steps"]):
            assert torch.equal(joined(per_rank, "outs", step), outs[step]), (options, step)
        assert_shards_equal(per_rank, weights)


def test_column_wise_row_wise_formats_quantize_each_slice(tmp_path):
    # A row-wise quantized table split by columns keeps a scale and bias per slice: its bits
    # are those of a one-process module holding the slices as tables (same keys).
    tables = [("t0", 60, 16, ["f0"]), ("t1", 40, 8, ["f1"])]
    plan = {"t0": ("cw", [0, 1]), "t1": ("tw", 0)}
    variants = [dict(SGD, storage=s) for s in ("int8", "int4")]
    case = dict(tables=tables, batch=3, steps=10, plan=plan, variants=variants)
    results = tc.spawn(tc.train_many_body, case, WORLD, tmp_path)
    for v, options in enumerate(variants):
        outs, weights = tc.shard_reference({**case, "options": options}, WORLD, case["steps"])
        per_rank = [r["variants"][v] for r in results]
        for step in range(case["steps"]):
            assert torch.equal(joined(per_rank, "outs", step), outs[step]), (options, step)
        assert_shards_equal(per_rank, weights)
        # ... and they are not the unsplit table's bits.
        whole, _, _ = tc.reference({**case, "options": options}, WORLD, 1)
        assert not torch.equal(joined(per_rank, "outs", 0), whole[0])


def test_gradient_division_off_gives_plain_sums_and_weighted_mean_cases(tmp_path):
    case = dict(tables=FOUR, batch=3, steps=8, plan=TW, division=False, weighted=True,
                variants=[dict(SGD, storage="fp16"), dict(SGD, storage="int8", optimizer="rowwise_adagrad")])
    results = tc.spawn(tc.train_many_body, case, WORLD, tmp_path)
    for v, options in enumerate(case["variants"]):
        outs, weights, _ = tc.reference({**case, "options": options}, WORLD, case["steps"], division=False)
        per_rank = [r["variants"][v] for r in results]
        for step in range(case["steps"]):
            assert torch.equal(joined(per_rank, "outs", step), outs[step])
        assert_shards_equal(per_rank, weights)
    mean = dict(tables=FOUR, batch=3, steps=6, plan=TW, pooling="mean", variants=[dict(SGD, storage="bf16")])
    results = tc.spawn(tc.train_many_body, mean, WORLD, tmp_path)
    outs, weights, _ = tc.reference({**mean, "options": mean["variants"][0]}, WORLD, mean["steps"])
    per_rank = [r["variants"][0] for r in results]
    for step in range(mean["steps"]):
        assert torch.equal(joined(per_rank, "outs", step), outs[step])
    assert_shards_equal(per_rank, weights)


def test_table_options_mix_storages_in_one_model(tmp_path):
    table_options = {"t1": dict(storage="int4", cache="lru", cache_fraction=0.5),
                     "t3": dict(storage="int4", cache="lru", cache_fraction=0.5)}
    case = dict(tables=FOUR, batch=4, steps=10, plan=TW, table_options=table_options,
                variants=[dict(SGD, storage="fp16")])
    results = tc.spawn(tc.train_many_body, case, WORLD, tmp_path)
    per_rank = [r["variants"][0] for r in results]
    # Rank 1 holds t1 and t3 (int4 + LRU, one kernel); rank 0 t0 and t2 (fp16). Reference:
    # each group of tables as its own one-process module, keyed by the tables' rows.
    fp16 = tc.reference({**case, "tables": [FOUR[0], FOUR[2]], "options": dict(SGD, storage="fp16")}, WORLD,
                        case["steps"], keys=[0, 157])
    int4 = tc.reference({**case, "tables": [FOUR[1], FOUR[3]], "options": dict(SGD, **table_options["t1"])}, WORLD,
                        case["steps"], keys=[100, 357])
    assert per_rank[0]["memory"]["cache_bytes"] == 0 and per_rank[1]["memory"]["cache_bytes"] > 0
    for rank, ref, names in ((0, fp16, ("t0", "t2")), (1, int4, ("t1", "t3"))):
        for name in names:
            assert_shards_equal([{"weights": {name: per_rank[rank]["weights"][name]}}], {name: ref[1][name]})


def _vbe_body(rank, world, case):
    model = tc.build_dmp(case, world)
    kt = model(tc.local_kjt(case, 0, rank, world))
    out = {f: kt[f].detach().clone() for f in tc.features(case)}
    kt2 = model(tc.local_kjt(case, 0, rank, world))
    torch.cat([kt2[f] for f in tc.features(case)], dim=1).sum().backward()
    return dict(out=out, weights=tc.local_weights(model))


def test_variable_batch_per_feature_matches_nn_embedding_bag(tmp_path):
    tables = [("t0", 100, 8, ["f0"]), ("t1", 57, 4, ["f1", "f3"]), ("t2", 200, 8, ["f2"])]
    case = dict(tables=tables, batch=4, vbe={0: [2, 3], 1: [1, 4], 2: [3, 1], 3: [4, 4]},
                plan={"t0": ("tw", 0), "t1": ("tw", 1), "t2": ("tw", 0)},
                options=dict(storage="fp32", optimizer="sgd", learning_rate=0.1, seed=3))
    results = tc.spawn(_vbe_body, case, WORLD, tmp_path)
    cfgs = tc.table_configs(case)
    # Each table as the sharded model holds it at the start: its keyed initial weights.
    init = mpe_torch.TableBatchedEmbeddingBags([(c.num_embeddings, c.embedding_dim) for c in cfgs],
                                               row_keys=[0, 100, 157], storage="fp32", seed=3)
    init.init_uniform([c.weight_init_min for c in cfgs], [c.weight_init_max for c in cfgs])
    bags, _ = tc.global_batch(case, 0, WORLD)
    feature_table = [0, 1, 1, 2]
    for f, name in enumerate(tc.features(case)):
        t = feature_table[f]
        bag = torch.nn.EmbeddingBag.from_pretrained(init.get_weights(t), mode="sum")
        sizes = tc.batch_sizes(case, f, WORLD)
        for rank, res in enumerate(results):
            lo = sum(sizes[:rank])
            mine = bags[f][lo:lo + sizes[rank]]
            lengths = torch.tensor([len(b) for b in mine])
            expect = bag(torch.cat(mine), torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]]))
            inv = tc.inverse_indices(case, rank, WORLD)[f]
            # Tolerance: nn.EmbeddingBag's CPU sum may group a bag's rows differently from
            # mpe's left-to-right sum (float addition is not associative); one ulp-scale bound.
            torch.testing.assert_close(res["out"][name], expect[inv], rtol=1e-6, atol=1e-6)
    # The training step through VBE: t1 is read by two features; every rank's weights moved.
    assert any(not torch.equal(w, init.get_weights(1)) for (_, _, w) in results[1]["weights"]["t1"])


def _resume_body(rank, world, case):
    import torch.distributed.checkpoint as dcp
    steps, half = case["steps"], case["steps"] // 2
    whole = tc.build_dmp(case, world)
    outs_whole = tc.train_steps(whole, case, rank, world, steps)
    first = tc.build_dmp(case, world)
    tc.train_steps(first, case, rank, world, half)
    sd = first.state_dict()
    path = os.path.join(case["dir"], f"sd{rank}.pt")
    torch.save(sd, path)
    dcp.save(first.state_dict(), checkpoint_id=os.path.join(case["dir"], "dcp"))
    readable = {k: v for k, v in sd.items() if k.endswith(".weight")}
    full = {}
    for k, v in readable.items():  # each table's (rows, D) float32 weights, gathered on rank 0
        out = torch.empty(v.size()) if rank == 0 else None
        v.gather(dst=0, out=out)
        full[k] = out
    results = dict(outs_whole=outs_whole, weights_whole=tc.local_weights(whole), readable=full,
                   weights_half=tc.local_weights(first),
                   logical={t.name: w for k in tc.sharded_module(first).kernels()
                            for t, w in zip(k._tables, k.logical_weights())})
    for how in ("state_dict", "dcp"):
        case2 = dict(case, options=dict(case["options"], seed=case["options"]["seed"] + 1))  # state brings the seed
        second = tc.build_dmp(case2, world)
        if how == "state_dict":
            second.load_state_dict(torch.load(path, weights_only=False))
        else:
            sd2 = second.state_dict()
            dcp.load(sd2, checkpoint_id=os.path.join(case["dir"], "dcp"))
            second.load_state_dict(sd2)
        outs = tc.train_steps(second, case, rank, world, steps - half, first=half)
        results[how] = dict(outs=outs, weights=tc.local_weights(second))
    # Another plan refuses the state, naming both, and loads nothing.
    other = dict(case, plan={n: ("tw", 1 - r) if k == "tw" else (k, r) for n, (k, r) in case["plan"].items()})
    third = tc.build_dmp(other, world)
    before = tc.local_weights(third)
    try:
        third.load_state_dict(torch.load(path, weights_only=False))
        results["refused"] = None
    except ValueError as e:
        results["refused"] = str(e)
    results["unchanged"] = all(torch.equal(a[2], b[2]) for n in before
                               for a, b in zip(before[n], tc.local_weights(third)[n]))
    return results


def assert_resumed(results, steps):
    """_resume_body's runs: both resumed runs (state_dict, DCP) equal the uninterrupted one
    (outputs and weights), and another plan was refused with nothing loaded."""
    for res in results:
        for how in ("state_dict", "dcp"):
            for i, out in enumerate(res[how]["outs"]):
                assert torch.equal(out, res["outs_whole"][steps // 2 + i]), (how, i)
            for name, shards in res["weights_whole"].items():
                for a, b in zip(shards, res[how]["weights"][name]):
                    assert torch.equal(a[2], b[2]), (how, name)
        assert res["refused"] is not None and "world size 2" in res["refused"], res["refused"]
        assert res["unchanged"]


@pytest.mark.parametrize("options", [dict(SGD, storage="int8", cache="lru", cache_fraction=0.2),
                                     dict(storage="int4", optimizer="rowwise_adagrad", learning_rate=0.05, seed=2,
                                          cache="lru", cache_fraction=0.3, defer_admission=True)],
                         ids=["int8_lru_sgd", "int4_lru_adagrad_deferred"])
def test_state_dict_and_dcp_resume_bit_for_bit(tmp_path, options):
    case = dict(tables=FOUR, batch=4, steps=12, plan=TW, options=options, dir=str(tmp_path))
    results = tc.spawn(_resume_body, case, WORLD, tmp_path)
    assert_resumed(results, case["steps"])
    for res in results:
        assert "t0: table_wise on ranks [0]" in res["refused"] and "t0: table_wise on ranks [1]" in res["refused"]
    # The state dict's weights read as the tables: rank 0 gathered each (rows, D) table.
    for c in tc.table_configs(case):
        full = results[0]["readable"][f"embedding_bags.{c.name}.weight"]
        assert full.shape == (c.num_embeddings, c.embedding_dim)
        owner = next(r for r in results if c.name in r["weights_half"])
        assert torch.equal(full, owner["weights_half"][c.name][0][2])


def test_sharder_refuses_bad_options_and_plans():
    with pytest.raises(ValueError, match="unknown option.*'storag'"):
        mt.EmbeddingBagCollectionSharder(fused_params=dict(storag="int8"))
    with pytest.raises(ValueError, match=r"table_options\['t1'\] has unknown option"):
        mt.EmbeddingBagCollectionSharder(table_options={"t1": dict(cach="lru")})
    with pytest.raises(ValueError, match="sets weights_init; .*weight_init_min, weight_init_max.*EmbeddingBagConfig"):
        mt.EmbeddingBagCollectionSharder(table_options={"t1": dict(weights_init="zeros")})
    with pytest.raises(TypeError, match="fused_params must be a dict"):
        mt.EmbeddingBagCollectionSharder(fused_params=[("storage", "int8")])
    s = mt.EmbeddingBagCollectionSharder()
    assert s.sharding_types("cpu") == ["table_wise", "column_wise"]
    assert s.compute_kernels("table_wise", "cpu") == [mt.MPE_KERNEL] and s.compute_kernels("row_wise", "cpu") == []


def _memory_body(rank, world, case):
    model = tc.build_dmp(case, world)
    tc.train_steps(model, case, rank, world, 1)  # the optimizer state exists after a step
    return dict(kernels={tuple(t.name for t in k._tables): k.tbe.memory() for k in tc.sharded_module(model).kernels()})


def test_planner_sees_mpe_bytes(tmp_path):
    # Each table its own kernel (different options), so a shard's estimate is its kernel.
    table_options = {"t0": dict(storage="int8", cache="lru", cache_fraction=0.05),
                     "t1": dict(storage="fp16", optimizer="adam", learning_rate=0.01),
                     "t2": dict(storage="int8", cache="lru", cache_fraction=0.3, optimizer="rowwise_adagrad",
                                state_precision="bf16")}
    case = dict(tables=FOUR[:3], batch=4, plan={"t0": ("tw", 0), "t1": ("tw", 0), "t2": ("tw", 0)},
                options=dict(SGD, storage="fp32"), table_options=table_options)
    built = tc.spawn(_memory_body, case, 1, tmp_path)[0]["kernels"]
    sharder = mt.EmbeddingBagCollectionSharder(fused_params=case["options"], table_options=table_options)
    for (name, rows, dim, _) in case["tables"]:
        m = built[(name,)]
        assert mt.shard_bytes(rows, dim, sharder.options(name)) == (
            m["store_bytes"] + m["cache_bytes"] + m["metadata_bytes"] + m["optimizer_bytes"]), name
    # The planner's estimate of each table-wise shard: mpe's bytes + TorchRec's I/O buffers.
    ebc = torchrec.EmbeddingBagCollection(tables=tc.table_configs(case), device=torch.device("meta"))
    options = mt.planner(1, sharder)._enumerator.enumerate(module=ebc, sharders=[sharder])
    # TorchRec's own estimate of the same shards on its fused FP32 kernel: its FP32 table + the I/O.
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder as FusedSharder
    from torchrec.distributed.planner import Topology
    from torchrec.distributed.planner.constants import BATCH_SIZE
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    fused = EmbeddingEnumerator(topology=Topology(world_size=1, compute_device="cpu"), batch_size=BATCH_SIZE)
    theirs = {(o.name, o.sharding_type): o for o in fused.enumerate(module=ebc, sharders=[FusedSharder()])
              if o.compute_kernel == "fused"}
    checked = 0
    for o in options:
        if o.sharding_type == "table_wise":
            rows, dim = o.tensor.shape
            io = theirs[(o.name, "table_wise")].shards[0].storage.ddr - 4 * rows * dim
            assert o.shards[0].storage.ddr == io + mt.shard_bytes(rows, dim, sharder.options(o.name)), o.name
            checked += 1
    assert checked == 3


def test_planner_fits_more_int8_tables_than_fp32():
    # 12 tables of 100,000 x 64 on 2 ranks whose memory holds 4 FP32 tables each: FP32 cannot be
    # placed, INT8 (72 B a row instead of 256, plus I/O buffers) can.
    from torchrec.distributed.planner.types import PlannerError
    configs = [torchrec.EmbeddingBagConfig(name=f"t{i}", embedding_dim=64, num_embeddings=100_000,
                                           feature_names=[f"f{i}"]) for i in range(12)]
    ebc = torchrec.EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    cap = 4 * (4 * 100_000 * 64) + (16 << 20)
    for storage, fits in (("fp32", False), ("int8", True)):
        sharder = mt.EmbeddingBagCollectionSharder(fused_params=dict(storage=storage))
        planner = mt.planner(2, sharder, ddr_bytes_per_rank=cap)
        if fits:
            plan = planner.plan(ebc, [sharder])
            assert all(p.compute_kernel == mt.MPE_KERNEL for p in plan.plan[""].values())
        else:
            with pytest.raises(PlannerError):
                planner.plan(ebc, [sharder])


def _lr_body(rank, world, case):
    model = tc.build_dmp(case, world)
    opt = model.fused_optimizer
    groups = len(opt.param_groups)
    for g in opt.param_groups:
        g["lr"] = 0.0
    opt.step()
    before = tc.local_weights(model)
    tc.train_steps(model, case, rank, world, 2)
    frozen = all(torch.equal(a[2], b[2]) for n in before for a, b in zip(before[n], tc.local_weights(model)[n]))
    for g in opt.param_groups:
        g["lr"] = 0.5
    opt.step()
    tc.train_steps(model, case, rank, world, 1, first=2)
    moved = any(not torch.equal(a[2], b[2]) for n in before for a, b in zip(before[n], tc.local_weights(model)[n]))
    lrs = sorted({k.tbe.get_learning_rate() for k in tc.sharded_module(model).kernels()})
    return dict(groups=groups, frozen=frozen, moved=moved, lrs=lrs)


def test_learning_rate_through_fused_optimizer(tmp_path):
    case = dict(tables=FOUR, batch=3, plan=TW, options=dict(SGD, storage="fp16"),
                table_options={"t1": dict(storage="int8")})
    for res in tc.spawn(_lr_body, case, WORLD, tmp_path):
        assert res["groups"] >= 1 and res["frozen"] and res["moved"] and res["lrs"] == [0.5]


def test_sharder_checks_option_values_at_construction():
    with pytest.raises(ValueError, match=r"table_options\['t1'\].*int3"):
        mt.EmbeddingBagCollectionSharder(table_options={"t1": dict(storage="int3")})
    with pytest.raises(ValueError, match="fused_params.*learning_rate"):
        mt.EmbeddingBagCollectionSharder(fused_params=dict(learning_rate=-1.0))
    with pytest.raises(ValueError, match="not built"):
        mt.EmbeddingBagCollectionSharder(fused_params=dict(storage="int4", cache="lfu", cache_fraction=0.1))
    with pytest.raises(ValueError, match="fused_params.*max_range_growth = 0.01 needs a storage with a per-row grid"):
        mt.EmbeddingBagCollectionSharder(fused_params=dict(storage="fp16", max_range_growth=0.01))
    # A table that turns its cache off drops the inherited fraction; EmbOptimType names map.
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    s = mt.EmbeddingBagCollectionSharder(fused_params=dict(cache="lru", cache_fraction=0.2,
                                                           optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD),
                                         table_options={"t1": dict(storage="fp16", cache="none")})
    assert s.options("t1") == dict(cache="none", storage="fp16", optimizer="rowwise_adagrad")
    assert s.options("t0")["cache_fraction"] == 0.2


def test_plans_refused_on_every_rank_before_building():
    sharder = mt.EmbeddingBagCollectionSharder()
    configs = [torchrec.EmbeddingBagConfig(name="t0", embedding_dim=12, num_embeddings=10, feature_names=["f0"])]
    ebc = torchrec.EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    with pytest.raises(ValueError, match=r"rank\(s\) \[5\]; world_size = 1"):
        mt.sharding_plan(ebc, {"t0": mt.table_wise(5)}, sharder, 1)
    with pytest.raises(ValueError, match="at least one rank"):
        mt.column_wise([])
    plan = mt.sharding_plan(ebc, {"t0": mt.column_wise(size_per_rank=[6, 6])}, sharder, 2)
    with pytest.raises(ValueError, match="starting at column 6"):
        sharder.shard(ebc, plan.plan[""], env=None)
    weighted = torchrec.EmbeddingBagCollection(tables=[torchrec.EmbeddingBagConfig(
        name="t0", embedding_dim=8, num_embeddings=10, feature_names=["f0"],
        pooling=torchrec.modules.embedding_configs.PoolingType.MEAN)], is_weighted=True, device=torch.device("meta"))
    plan = mt.sharding_plan(weighted, {"t0": mt.table_wise(0)}, sharder, 1)
    with pytest.raises(ValueError, match=r"weighted and table\(s\) \['t0'\] pool by MEAN"):
        sharder.shard(weighted, plan.plan[""], env=None)


def _kernel(options, tables):
    """One MpeEmbeddingBag over ``tables`` ((name, rows, D, low, high), table-wise, keyed by
    their place in that list), built in this process as TorchRec's lookup builds it."""
    from torchrec.distributed.embedding_types import (GroupedEmbeddingConfig, ShardedEmbeddingTable,
                                                      EmbeddingComputeKernel)
    from torchrec.modules.embedding_configs import DataType, PoolingType
    sharded = [ShardedEmbeddingTable(num_embeddings=r, embedding_dim=d, name=n, feature_names=[n + "_f"],
                                     local_rows=r, local_cols=d, weight_init_min=lo, weight_init_max=hi,
                                     pooling=PoolingType.SUM) for n, r, d, lo, hi in tables]
    config = GroupedEmbeddingConfig(data_type=DataType.FP32, pooling=PoolingType.SUM, is_weighted=False,
                                    has_feature_processor=False,
                                    compute_kernel=EmbeddingComputeKernel.CUSTOMIZED_KERNEL,
                                    embedding_tables=sharded,
                                    fused_params={"mpe_options": tuple(sorted(options.items()))})
    keys, start = {}, 0
    for n, r, *_ in tables:
        keys[n], start = start, start + r
    return mt.MpeEmbeddingBag(config, keys)


def test_kernel_starts_at_its_configs_ranges_once(monkeypatch):
    # The kernel's tables start U(weight_init_min, weight_init_max) of their configs, keyed by
    # their rows in the collection, drawn once (weights_init at construction, not a default
    # draw followed by reset_parameters' one); reset_parameters draws the same bits again.
    tables = [("a", 50, 8, -0.1, 0.2), ("b", 30, 8, -0.5, 0.5), ("c", 70, 4, -0.01, 0.01)]
    draws = []
    real = mpe_torch.TableBatchedEmbeddingBags.init_uniform
    monkeypatch.setattr(mpe_torch.TableBatchedEmbeddingBags, "init_uniform",
                        lambda self, low, high: (draws.append((low, high)), real(self, low, high))[1])
    k = _kernel(dict(storage="int8", seed=5), tables)
    assert draws == [([-0.1, -0.5, -0.01], [0.2, 0.5, 0.01])]
    monkeypatch.undo()
    ref = mpe_torch.TableBatchedEmbeddingBags([(r, d) for _, r, d, _, _ in tables], storage="int8", seed=5,
                                              row_keys=[0, 50, 80], weights_init="zeros")
    ref.init_uniform([t[3] for t in tables], [t[4] for t in tables])
    start = k.weights()
    for t, w in enumerate(start):
        assert torch.equal(w, ref.get_weights(t)), t
        assert w.min().item() >= tables[t][3] * (1 + 1e-6) and w.max().item() <= tables[t][4] * (1 + 1e-6)
    k.tbe.set_weights(1, torch.zeros(30, 8))
    k.reset_parameters()
    assert all(torch.equal(a, b) for a, b in zip(k.weights(), start))


def test_kernel_refuses_moves_and_conversions():
    k = _kernel(dict(storage="fp16", seed=1), [("a", 20, 8, -0.1, 0.1)])
    for convert in (lambda m: m.half(), lambda m: m.double()):
        with pytest.raises(RuntimeError, match=r"MpeEmbeddingBag cannot be moved or converted \(asked for .*\).*"
                                               "sharder's fused_params or table_options"):
            convert(k)
    with pytest.raises(RuntimeError, match="MpeEmbeddingBag cannot be converted to torch.bfloat16: .*"
                                           "sharder's fused_params or table_options"):
        k.to(torch.bfloat16)
    with pytest.raises(RuntimeError, match="MpeEmbeddingBag cannot be moved to meta: .*CPU only"):
        k.to("meta")
    # cuda: where it can run, test_torchrec_cuda.py moves kernels there.
    can_cuda = torch.cuda.is_available() and mpe_torch.built_with_cuda()
    for device in ("xpu",) if can_cuda else ("cuda", "xpu"):
        with pytest.raises(RuntimeError, match=f"MpeEmbeddingBag cannot be moved to {device}: .*CPU only"):
            getattr(k, device)()
    assert k.cpu() is k and k.float() is k and k.to("cpu") is k
