# SPDX-License-Identifier: Apache-2.0
"""The 26-table embedding training step through TorchRec's DistributedModelParallel: mpe's
sharder against TorchRec's default fused kernel (fbgemm-gpu-cpu's TBE), in one run.

  torchrun --nproc_per_node 1 bench/torch_step/dmp_step.py --steps 100
  torchrun --nproc_per_node 2 bench/torch_step/dmp_step.py --steps 100

Every variant is a sharded EmbeddingBagCollection of the same 26 tables (the synthetic
Criteo-shaped data at --scale 0.09: 3.0M rows, D = 64), placed by the same table-wise plan
(tables dealt largest first to the least loaded rank), trained with SGD fused into backward,
fed the same batches (--batch-size samples in all, each rank its share; one index per table
per sample, Zipf 1.05). For each batch every variant runs one step (forward through the
all-to-alls, backward of a fixed random gradient of the pooled output), the variants' order
rotating from batch to batch; a step is timed by wall clock between two barriers, so it is
the slowest rank's. Rank 0 prints per variant the median ms per step, the median over
batches of its ratio to the fused kernel's step on the same batch, and the embedding memory
summed over ranks (mpe: store + cache + metadata + optimizer state; fused: its FP32 weights).

Needs: torch, fbgemm_gpu (fbgemm-gpu-cpu: the fused kernel), torchrec, mpe_torch and Eigen's
headers (the data helper of python/examples/torch_dlrm.py); a missing one is named with its
install command at start (exit status 2; python/README.md, Install).
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python", "examples"))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see torch_dlrm.py
from _needs import require  # noqa: E402

require("torch", "fbgemm_gpu", "torchrec", "mpe_torch", "eigen")

import torch_dlrm  # noqa: E402  (sets OMP_WAIT_POLICY=PASSIVE before torch loads)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torchrec_dlrm import init_process_group, to_kjt  # noqa: E402

VARIANTS = {"fused": None, "mpe_fp32": dict(storage="fp32", cache="none"),
            "mpe_int8_lru5": dict(storage="int8", cache="lru", cache_fraction=0.05),
            "mpe_int4_lru1": dict(storage="int4", cache="lru", cache_fraction=0.01)}


def build(name, table_rows, args, world):
    import torchrec
    from torchrec.distributed import sharding_plan as sp
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.types import ShardingEnv, ShardingPlan
    tables = [torchrec.EmbeddingBagConfig(name=f"t{i}", embedding_dim=args.dim, num_embeddings=rows,
                                          feature_names=[f"cat_{i}"], weight_init_min=-0.05, weight_init_max=0.05)
              for i, rows in enumerate(table_rows)]
    ebc = torchrec.EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    if name == "fused":
        from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
        from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
        apply_optimizer_in_backward(torch.optim.SGD, ebc.parameters(), {"lr": args.emb_lr})
        sharder, tw = EmbeddingBagCollectionSharder(), (lambda r: sp.table_wise(rank=r, compute_kernel="fused"))
    else:
        import mpe_torch.torchrec as mt
        sharder = mt.EmbeddingBagCollectionSharder(fused_params=dict(VARIANTS[name], optimizer="sgd",
                                                                     learning_rate=args.emb_lr, seed=args.seed))
        tw = mt.table_wise
    load, per = [0] * world, {}
    for t in sorted(tables, key=lambda t: -t.num_embeddings):
        r = load.index(min(load))
        load[r] += t.num_embeddings
        per[t.name] = tw(r)
    plan = ShardingPlan({"": sp.construct_module_sharding_plan(ebc, per, sharder=sharder, local_size=world,
                                                                world_size=world, device_type="cpu")})
    return DistributedModelParallel(ebc, env=ShardingEnv.from_process_group(dist.group.WORLD),
                                    device=torch.device("cpu"), plan=plan, sharders=[sharder])


def memory(name, model, args, table_rows, world):
    if name == "fused":
        mine = sum(p.numel() * p.element_size() for _, p in model.named_parameters())
    else:
        import mpe_torch.torchrec as mt
        mine = sum(sum(v for k, v in m.memory().items() if k in ("store_bytes", "cache_bytes", "metadata_bytes",
                                                                 "optimizer_bytes"))
                   for m in model.modules() if isinstance(m, mt.ShardedEmbeddingBagCollection))
    t = torch.tensor([mine], dtype=torch.int64)
    dist.all_reduce(t)
    return int(t.item())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="fused,mpe_fp32,mpe_int8_lru5",
                    help="comma-separated, the first is the reference: " + ", ".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=100, help="timed batches")
    ap.add_argument("--warmup", type=int, default=10, help="batches run but not timed")
    ap.add_argument("--scale", type=float, default=0.09)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=2048, help="global batch (all processes together)")
    ap.add_argument("--emb-lr", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    names = args.variants.split(",")
    rank, world = init_process_group()
    torch.set_num_threads(args.threads)
    dm = torch_dlrm.load_data_module()
    data = dm.synthetic(args.scale, 1.05, 1.0, 1, (args.steps + args.warmup) * args.batch_size, 1)
    table_rows = list(data.table_rows)
    models = {n: build(n, table_rows, args, world) for n in names}
    g = torch.Generator().manual_seed(args.seed)
    grad = torch.randn(args.batch_size, len(table_rows) * args.dim, generator=g) * 1e-3
    src, times = data.train(), {n: [] for n in names}
    B = args.batch_size
    lo, hi = rank * B // world, (rank + 1) * B // world
    for step in range(args.warmup + args.steps):
        batch = src.next(B)
        if batch is None or batch[3].numel() < B:
            break
        _, idx, off, _, _ = batch
        kjt = to_kjt(idx, off, B, lo, hi)
        order = names[step % len(names):] + names[:step % len(names)]
        for n in order:
            dist.barrier()
            t0 = time.perf_counter()
            kt = models[n](kjt)
            kt.values().backward(grad[lo:hi])
            dist.barrier()
            if step >= args.warmup:
                times[n].append(time.perf_counter() - t0)
    mem = {n: memory(n, models[n], args, table_rows, world) for n in names}
    if rank == 0:
        ref = names[0]
        res = dict(world_size=world, threads=args.threads, rows=sum(table_rows), dim=args.dim, batch_size=B,
                   steps=len(times[ref]), cpu=_cpu(), variants={})
        for n in names:
            ratio = statistics.median(a / b for a, b in zip(times[n], times[ref]))
            res["variants"][n] = dict(ms=1000 * statistics.median(times[n]), ratio=ratio, memory_bytes=mem[n])
            print(f"{n:14s} {res['variants'][n]['ms']:8.2f} ms/step  {ratio:5.2f}x {ref}  "
                  f"{mem[n] / 2**20:8.1f} MiB  ({world} process(es), {args.threads} thread(s) each)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
    dist.destroy_process_group()


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


if __name__ == "__main__":
    main()
