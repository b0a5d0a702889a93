# SPDX-License-Identifier: Apache-2.0
"""mpe's TorchRec sharder on CUDA devices.

Everywhere (the planner and the sharder need no GPU): the planner's storage estimates with
``compute_device="cuda"`` against ``mpe_torch.planned_memory`` and TorchRec's own estimate of
the same shards' I/O buffers, the sharding types and kernels offered for cuda, the plans'
CUDA placements, and the refusals where the CUDA module or a GPU is missing.

With a CUDA device, mpe_torch's CUDA module (``built_with_cuda()``) and a CUDA build of fbgemm_gpu
(TorchRec's input distribution on CUDA runs its ops; skipped elsewhere): a
one-process DMP (world size 1, gloo for CPU tensors and NCCL for CUDA ones) on cuda:0 trains
the CPU DMP's bits (mpe's CUDA backend gives the host backend's bits: docs/numerics.md, so
every comparison is exact), and its state_dict loads into the CPU DMP and back.
"""
import pytest
import torch

torchrec = pytest.importorskip("torchrec", reason="torchrec is not installed (python/ci_venv.sh installs it)")

import mpe_torch  # noqa: E402
import mpe_torch.torchrec as mt  # noqa: E402
import torchrec_cases as tc  # noqa: E402

HAS_GPU = torch.cuda.is_available() and mpe_torch.built_with_cuda()


def _fbgemm_has_cuda():
    """TorchRec's CUDA input distribution runs fbgemm_gpu's CUDA ops (fbgemm-gpu-cpu has none)."""
    try:
        torch.ops.fbgemm.asynchronous_complete_cumsum(torch.ones(2, dtype=torch.int64, device="cuda"))
        return True
    except (RuntimeError, NotImplementedError, AttributeError):
        return False


gpu = pytest.mark.skipif(not (HAS_GPU and _fbgemm_has_cuda()),
                         reason="needs a CUDA device, mpe_torch's CUDA module (built_with_cuda()) and fbgemm_gpu's "
                                "CUDA ops (TorchRec's input distribution on CUDA)")

TABLES = [("t0", 1000, 16, ["f0"]), ("t1", 300, 8, ["f1"]), ("t2", 4096, 32, ["f2"])]


def _ebc(tables):
    return torchrec.EmbeddingBagCollection(tables=tc.table_configs(dict(tables=tables)), device=torch.device("meta"))


# ---- everywhere ----

def test_sharder_offers_its_types_and_kernel_for_cuda_and_refuses_other_devices():
    sharder = mt.EmbeddingBagCollectionSharder()
    for device in mt.COMPUTE_DEVICES:
        assert sharder.sharding_types(device) == ["table_wise", "column_wise"]
        assert sharder.compute_kernels("table_wise", device) == [mt.MPE_KERNEL]
        assert sharder.compute_kernels("column_wise", device) == [mt.MPE_KERNEL]
        assert sharder.compute_kernels("row_wise", device) == []
    for device in ("mtia", "xpu"):
        with pytest.raises(ValueError, match=f"compute_device_type = '{device}': mpe's kernels run on cpu or cuda"):
            sharder.sharding_types(device)
        with pytest.raises(ValueError, match=f"compute_device_type = '{device}'"):
            sharder.compute_kernels("table_wise", device)
    with pytest.raises(ValueError, match="compute_device = 'mtia'"):
        mt.planner(1, sharder, compute_device="mtia")
    with pytest.raises(ValueError, match="store_placement = 'hbm' is not one of device, host_mapped, managed"):
        mt.EmbeddingBagCollectionSharder(fused_params=dict(store_placement="hbm"))


# (fused_params, table_options): every table its own kernel, so a shard's estimate is its kernel's.
CONFIGS = {
    "int8_lru_device": (dict(storage="int8", cache="lru", cache_fraction=0.1, optimizer="rowwise_adagrad"),
                        {"t1": dict(storage="fp16", cache="none", optimizer="adam")}),
    "host_mapped_store": (dict(storage="int4", cache="lru", cache_fraction=0.05, optimizer="sgd",
                               store_placement="host_mapped"),
                          {"t0": dict(storage="fp32", optimizer="adagrad", store_placement="device"),
                           "t1": dict(cache="none")}),
    "managed_store": (dict(storage="fp16", cache="lru", cache_fraction=0.3, optimizer="adam",
                           store_placement="managed"),
                      {"t2": dict(storage="int8", cache="none", optimizer="rowwise_adagrad")}),
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_cuda_planner_estimates_are_mpe_planned_memory(config):
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder as FusedSharder
    from torchrec.distributed.planner import Topology
    from torchrec.distributed.planner.constants import BATCH_SIZE
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.types import ParameterConstraints
    fused_params, table_options = CONFIGS[config]
    sharder = mt.EmbeddingBagCollectionSharder(fused_params=fused_params, table_options=table_options)
    ebc = _ebc(TABLES)
    # t2 (D = 32) in column slices of 8: shards keyed by their first column (column_keys).
    constraints = {"t2": ParameterConstraints(min_partition=8)}
    mine = mt.planner(2, sharder, constraints=constraints, compute_device="cuda")._enumerator.enumerate(
        module=ebc, sharders=[sharder])
    # TorchRec's estimate of the same shards on its fused FP32 kernel on CUDA: its FP32 slice + the
    # I/O buffers, all in HBM.
    theirs_enum = EmbeddingEnumerator(topology=Topology(world_size=2, compute_device="cuda"), batch_size=BATCH_SIZE,
                                      constraints=constraints)
    theirs = {}
    for o in theirs_enum.enumerate(module=ebc, sharders=[FusedSharder()]):
        if o.compute_kernel == "fused":
            theirs[(o.name, o.sharding_type, tuple((tuple(s.offset), tuple(s.size)) for s in o.shards))] = o
    checked, host_stores, sliced = 0, 0, 0
    for o in mine:
        if o.sharding_type not in ("table_wise", "column_wise"):
            continue
        assert o.compute_kernel == mt.MPE_KERNEL
        ref = theirs[(o.name, o.sharding_type, tuple((tuple(s.offset), tuple(s.size)) for s in o.shards))]
        opts = sharder.options(o.name)
        for shard, fused in zip(o.shards, ref.shards):
            rows, cols = shard.size
            assert fused.storage.ddr == 0  # TorchRec's fused kernel on CUDA: all in HBM
            io = fused.storage.hbm - 4 * rows * cols  # its FP32 slice (a whole number of bytes)
            m = mpe_torch.planned_memory(
                [(rows, cols)], row_keys=[0], column_keys=[shard.offset[1]] if shard.offset[1] else None,
                **{k: opts[k] for k in ("storage", "cache", "cache_fraction", "optimizer") if k in opts})
            rest = m["cache_bytes"] + m["optimizer_bytes"] + m["metadata_bytes"]
            if opts.get("store_placement", "device") == "device":
                expected = (io + m["store_bytes"] + rest, 0)
            else:  # the store in host memory; cache, optimizer state and metadata in HBM
                expected = (io + rest, m["store_bytes"])
                host_stores += 1
            assert (shard.storage.hbm, shard.storage.ddr) == expected, (o.name, o.sharding_type, shard.offset)
            assert mt.shard_storage(rows, cols, opts, shard.offset[1], "cuda") == (expected[0] - io, expected[1])
            assert sum(mt.shard_storage(rows, cols, opts, shard.offset[1], "cuda")) == \
                mt.shard_bytes(rows, cols, opts, shard.offset[1])
            checked += 1
            sliced += shard.offset[1] > 0
    assert checked >= 2 * len(TABLES) and sliced >= 3  # table-wise shards and column slices
    assert (host_stores > 0) == (config != "int8_lru_device")


def test_cuda_planner_moves_stores_to_host_memory_when_hbm_is_short():
    # 8 INT8 tables of 100,000 x 64 (72 B a row: 7.2 MB a store) on 2 GPUs whose HBM holds the
    # caches and TorchRec's I/O buffers but not 4 stores each: device stores cannot be placed,
    # host-mapped ones can (their caches, optimizer state and metadata in HBM).
    from torchrec.distributed.planner.types import PlannerError
    configs = [torchrec.EmbeddingBagConfig(name=f"t{i}", embedding_dim=64, num_embeddings=100_000,
                                           feature_names=[f"f{i}"]) for i in range(8)]
    ebc = torchrec.EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    base = dict(storage="int8", cache="lru", cache_fraction=0.01, optimizer="rowwise_adagrad")
    store = mpe_torch.planned_memory([(100_000, 64)], storage="int8", cache="lru", cache_fraction=0.01,
                                     optimizer="rowwise_adagrad")["store_bytes"]
    # HBM room for 2 stores a rank and 10 MiB for the rest (a table's cache of 1,000 slots of
    # 273 B, its 400 kB of row-wise Adagrad state, TorchRec's I/O buffers); 256 GiB of DDR.
    hbm = 2 * store + (10 << 20)
    for placement, fits in (("device", False), ("host_mapped", True)):
        sharder = mt.EmbeddingBagCollectionSharder(fused_params=dict(base, store_placement=placement))
        planner = mt.planner(2, sharder, compute_device="cuda", hbm_bytes_per_rank=hbm, ddr_bytes_per_rank=256 << 30)
        if fits:
            plan = planner.plan(ebc, [sharder]).plan[""]
            assert all(p.compute_kernel == mt.MPE_KERNEL for p in plan.values())
            for p in plan.values():
                for s in p.sharding_spec.shards:
                    assert s.placement.device() == torch.device("cuda", s.placement.rank())
        else:
            with pytest.raises(PlannerError):
                planner.plan(ebc, [sharder])


def test_sharding_plan_places_shards_on_each_ranks_gpu():
    ebc = _ebc(TABLES)
    sharder = mt.EmbeddingBagCollectionSharder()
    per_table = {"t0": mt.table_wise(1), "t1": mt.table_wise(0), "t2": mt.column_wise([0, 1])}
    plan = mt.sharding_plan(ebc, per_table, sharder, 2, compute_device="cuda").plan[""]
    got = {n: [str(s.placement) for s in p.sharding_spec.shards] for n, p in plan.items()}
    assert got == {"t0": ["rank:1/cuda:1"], "t1": ["rank:0/cuda:0"], "t2": ["rank:0/cuda:0", "rank:1/cuda:1"]}
    with pytest.raises(ValueError, match="compute_device = 'tpu'"):
        mt.sharding_plan(ebc, per_table, sharder, 2, compute_device="tpu")


def _shard_on(device, monkeypatch=None, plan_device="cuda"):
    from torchrec.distributed.types import ShardingEnv
    ebc = _ebc(TABLES)
    sharder = mt.EmbeddingBagCollectionSharder(fused_params=dict(storage="int8"))
    per_table = {name: mt.table_wise(0) for name, *_ in TABLES}
    params = mt.sharding_plan(ebc, per_table, sharder, 1, compute_device=plan_device).plan[""]
    return sharder.shard(ebc, params, ShardingEnv(world_size=1, rank=0, pg=None), device=torch.device(device))


def test_a_plan_for_another_device_type_is_refused():
    # mpe builds its kernels on DMP's device: a CUDA plan on a CPU DMP (or the reverse) is
    # refused naming the table, the plan's placement and DMP's device (before anything is built).
    with pytest.raises(ValueError, match=r"places table 't0' on cuda:0, but DMP's device is cpu; make the plan "
                                         r"for DMP's device \(planner\(compute_device='cpu'\)"):
        _shard_on("cpu")
    with pytest.raises(ValueError, match=r"places table 't0' on cpu, but DMP's device is cuda:0"):
        _shard_on("cuda:0", plan_device="cpu")


def test_cuda_plan_is_refused_without_the_cuda_module_or_a_gpu(monkeypatch):
    # Both reasons simulated, so this runs (and can fail) on every machine.
    monkeypatch.setattr(mpe_torch, "_C_cuda", None)
    with pytest.raises(RuntimeError, match=r"DMP's device is cuda:0, but this mpe_torch.* CUDA "
                                           r"module.*shard onto the CPU instead"):
        _shard_on("cuda:0")
    monkeypatch.setattr(mpe_torch, "_C_cuda", object())  # "built", but no device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"is cuda:0, but torch.cuda.is_available\(\) is False"):
        _shard_on("cuda:0")
    with pytest.raises(ValueError, match="DMP asked for device xpu; mpe's kernels run on cpu or cuda devices only"):
        _shard_on("xpu")


def test_bag_plan_copies_its_indices_to_a_device_once():
    # A batch shape's index tensors are built on the host and copied to the module's device
    # once (the meta device stands in for a GPU here); the host ones serve the CPU as they are.
    from mpe_torch._layout import BagPlanCache
    cache = BagPlanCache([0, 0, 1], [4, 8])  # two features on table 0, one on table 1
    plan = cache.get([[2], [2], [2]], False)
    on_cpu = torch.zeros(7, dtype=torch.int64)
    assert plan.offsets(on_cpu).device.type == "cpu" and plan._on == {}
    meta = torch.device("meta")
    first = plan.offsets(torch.zeros(7, dtype=torch.int64, device=meta))
    again = plan.offsets(torch.zeros(7, dtype=torch.int64, device=meta))
    out = plan.output(torch.zeros(plan.padded_batch, 12, device=meta))
    assert first.device == again.device == out.device == meta and out.shape == (2, 16)
    assert set(plan._on) == {("offsets_index", meta), ("gather", meta)}
    copy = plan._on[("offsets_index", meta)]
    plan.offsets(torch.zeros(7, dtype=torch.int64, device=meta))
    assert plan._on[("offsets_index", meta)] is copy


# ---- on a CUDA device ----

CASES = {
    "tw_int8_lru_adagrad": dict(tables=[("t0", 100, 8, ["f0"]), ("t1", 57, 8, ["f1"]), ("t2", 200, 16, ["f2"])],
                                batch=4, steps=6, plan={"t0": ("tw", 0), "t1": ("tw", 0), "t2": ("tw", 0)},
                                options=dict(storage="int8", cache="lru", cache_fraction=0.2,
                                             optimizer="rowwise_adagrad", learning_rate=0.05, seed=7)),
    "cw_fp16_host_mapped_vbe": dict(
        tables=[("a", 80, 8, ["fa", "fb"]), ("b", 120, 16, ["fc"])], batch=3, steps=5, weighted=True,
        plan={"a": ("tw", 0), "b": ("cw", [0, 0])}, vbe={0: [2], 1: [3], 2: [1]},
        options=dict(storage="fp16", cache="lru", cache_fraction=0.5, optimizer="sgd", learning_rate=0.3, seed=3),
        table_options={"b": dict(storage="int4", store_placement="host_mapped"),
                       # a tiered table read by two features: its map runs on the host
                       "a": dict(tiers=dict(private_rows=8, shared_rows=20, promote_at=2, demote_below=1,
                                            decay_every=20))}),
}


def _cuda_vs_cpu_body(rank, world, case):
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    steps = case["steps"]
    cpu = tc.build_dmp(case, 1)
    cpu_outs = tc.train_steps(cpu, case, 0, 1, steps)
    cuda = tc.build_dmp(case, 1, device=dev)
    kernels = tc.sharded_module(cuda).kernels()
    on_cuda = all(k.tbe.device == dev for k in kernels)
    placements = sorted(k.tbe.store_placement for k in kernels)
    cuda_outs = tc.train_steps(cuda, case, 0, 1, steps, device=dev)
    res = dict(on_cuda=on_cuda, placements=placements, cpu_outs=cpu_outs, cuda_outs=cuda_outs,
               cpu_weights=tc.local_weights(cpu), cuda_weights=tc.local_weights(cuda),
               cpu_memory=tc.sharded_module(cpu).memory(), cuda_memory=tc.sharded_module(cuda).memory())
    cuda_state, cpu_state = cuda.state_dict(), cpu.state_dict()
    res["state_device"] = [str(v.local_shards()[0].tensor.device) for k, v in cuda_state.items()
                           if k.endswith(".weight") and v.local_shards()]
    # The CUDA state into a fresh CPU DMP (another seed: the state brings its own), and the
    # CPU state into a fresh CUDA DMP: each then trains as the model it came from.
    other = dict(case, options=dict(case["options"], seed=case["options"]["seed"] + 1))
    cpu2 = tc.build_dmp(other, 1)
    cpu2.load_state_dict(cuda_state)
    cuda2 = tc.build_dmp(other, 1, device=dev)
    cuda2.load_state_dict(cpu_state)
    res["loaded_weights"] = (tc.local_weights(cpu2), tc.local_weights(cuda2))
    res["more"] = [tc.train_steps(m, case, 0, 1, 2, first=steps, device=d)
                   for m, d in ((cpu, None), (cpu2, None), (cuda, dev), (cuda2, dev))]
    res["more_weights"] = [tc.local_weights(m) for m in (cpu, cpu2, cuda, cuda2)]
    return res


def _assert_weights_equal(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        assert len(a[name]) == len(b[name])
        for (r0, c0, x), (s0, d0, y) in zip(a[name], b[name]):
            assert (r0, c0) == (s0, d0) and torch.equal(x, y), (name, r0, c0)


@gpu
@pytest.mark.parametrize("case", list(CASES))
def test_one_process_cuda_dmp_trains_the_cpu_bits_and_its_state_moves(tmp_path, case):
    case = CASES[case]
    res = tc.spawn(_cuda_vs_cpu_body, case, 1, tmp_path, backend="cpu:gloo,cuda:nccl")[0]
    assert res["on_cuda"]
    assert ("host_mapped" in res["placements"]) == ("table_options" in case)
    assert len(res["cuda_outs"]) == case["steps"]
    for i, (a, b) in enumerate(zip(res["cuda_outs"], res["cpu_outs"])):
        assert torch.equal(a, b), i
    _assert_weights_equal(res["cuda_weights"], res["cpu_weights"])
    for key in ("store_bytes", "cache_bytes", "optimizer_bytes", "metadata_bytes"):  # the same layout on both
        assert res["cuda_memory"][key] == res["cpu_memory"][key], key
    assert res["state_device"] and all(d == "cuda:0" for d in res["state_device"])
    cpu_loaded, cuda_loaded = res["loaded_weights"]
    _assert_weights_equal(cpu_loaded, res["cuda_weights"])
    _assert_weights_equal(cuda_loaded, res["cpu_weights"])
    for outs in res["more"][1:]:
        for a, b in zip(outs, res["more"][0]):
            assert torch.equal(a, b)
    for w in res["more_weights"][1:]:
        _assert_weights_equal(w, res["more_weights"][0])
