# SPDX-License-Identifier: Apache-2.0
"""TorchRec's DLRM with its EmbeddingBagCollection sharded by mpe's sharder (or TorchRec's
default fused FBGEMM kernel), trained with DistributedModelParallel on the CPU (gloo).

  torchrun --nproc_per_node 2 python/examples/torchrec_dlrm.py --kernel mpe --storage int8 --cache lru --cache-fraction 0.05
  torchrun --nproc_per_node 2 python/examples/torchrec_dlrm.py --kernel fused        # TorchRec's default kernel, FP32
  python python/examples/torchrec_dlrm.py --data ../shared/data/criteo-terabyte-day0-head1k.tsv --test-fraction 0.2
  torchrun --nproc_per_node 2 python/examples/torchrec_dlrm.py --storage int4 --cache none --tiers 0.02,0.1

Model: ``torchrec.models.dlrm.DLRM`` (dense arch 13 -> 64 -> D, 26 tables of D, dot
interaction, over arch -> 64 -> 1), BCE loss, SGD at --lr for the dense layers and the
embeddings (the embeddings' update fused into backward by either kernel). Data: the C++
trainer's generator and Criteo reader (torch_dlrm.py's data helper): the synthetic
Criteo-Kaggle-shaped stream (scale 0.01: 26 tables, 337,640 rows) or a Criteo-format file
(--data). Every process reads the same stream and takes its share of each global batch
(--batch-size samples in all). --plan: table-wise (default), column-wise, or TorchRec's
planner (with mpe's byte estimates for mpe's kernel: mpe_torch.torchrec.planner).

Rank 0 prints one line: log loss and AUC on the test set (every rank's predictions), the step
time, and the embedding memory summed over ranks (store + cache + metadata + the maps of tables
tiered by --tiers; the optimizer state is 0 for SGD). Without torchrun it runs as one process.

Needs: torch, fbgemm_gpu (fbgemm-gpu-cpu: TorchRec imports it), torchrec, Eigen's headers (the
data helper) and, for --kernel mpe, mpe_torch; a missing one is named with its install command
at start (exit status 2; python/README.md, Install).
"""
import argparse
import json
import math
import os
import socket
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see torch_dlrm.py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _needs import require  # noqa: E402

require("torch", "fbgemm_gpu", "torchrec", "eigen")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from torch_dlrm import NUM_CAT, NUM_DENSE, add_data_arguments, batches, load_data, log_loss, roc_auc  # noqa: E402


def init_process_group():
    if "RANK" not in os.environ:  # a plain `python` run: one process
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def build_model(args, table_rows, world):
    import torchrec
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.types import ShardingEnv
    from torchrec.models.dlrm import DLRM
    tables = [torchrec.EmbeddingBagConfig(name=f"t{i}", embedding_dim=args.dim, num_embeddings=rows,
                                          feature_names=[f"cat_{i}"], weight_init_min=-args.emb_init,
                                          weight_init_max=args.emb_init)
              for i, rows in enumerate(table_rows)]
    ebc = torchrec.EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    model = DLRM(embedding_bag_collection=ebc, dense_in_features=NUM_DENSE, dense_arch_layer_sizes=[64, args.dim],
                 over_arch_layer_sizes=[64, 1])
    if args.kernel == "mpe":
        import mpe_torch.torchrec as mt
        options = dict(storage=args.storage, cache=args.cache, rounding=args.rounding, optimizer="sgd",
                       learning_rate=args.emb_lr, seed=args.seed)
        if args.cache != "none":
            options["cache_fraction"] = args.cache_fraction
        sharder = mt.EmbeddingBagCollectionSharder(fused_params=options, table_options=tier_options(args, tables))
        kernel, table_wise, column_wise = mt.MPE_KERNEL, mt.table_wise, mt.column_wise
    else:
        from torchrec.distributed import sharding_plan as sp
        from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
        from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
        apply_optimizer_in_backward(torch.optim.SGD, model.sparse_arch.parameters(), {"lr": args.emb_lr})
        sharder = EmbeddingBagCollectionSharder()
        kernel = "fused"
        table_wise = lambda r: sp.table_wise(rank=r, compute_kernel=kernel)  # noqa: E731
        column_wise = lambda ranks: sp.column_wise(ranks=ranks, compute_kernel=kernel)  # noqa: E731
    if args.plan == "planner":
        from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
        constraints = {t.name: ParameterConstraints(sharding_types=["table_wise", "column_wise"],
                                                    compute_kernels=[kernel]) for t in tables}
        if args.kernel == "mpe":
            planner = mt.planner(world_size=world, sharder=sharder, constraints=constraints)
        else:
            planner = EmbeddingShardingPlanner(topology=Topology(world_size=world, compute_device="cpu"),
                                               constraints=constraints)
        plan = planner.collective_plan(model, [sharder], dist.group.WORLD)
    else:
        from torchrec.distributed.sharding_plan import construct_module_sharding_plan
        from torchrec.distributed.types import ShardingPlan
        # Table-wise: tables dealt to the ranks largest first, each to the least loaded.
        load, per = [0] * world, {}
        for t in sorted(tables, key=lambda t: -t.num_embeddings):
            r = load.index(min(load))
            load[r] += t.num_embeddings
            per[t.name] = table_wise(r) if args.plan == "table-wise" else column_wise(list(range(world)))
        plan = ShardingPlan({"sparse_arch.embedding_bag_collection": construct_module_sharding_plan(
            ebc, per, sharder=sharder, local_size=world, world_size=world, device_type="cpu")})
    dmp = DistributedModelParallel(model, env=ShardingEnv.from_process_group(dist.group.WORLD),
                                   device=torch.device("cpu"), plan=plan, sharders=[sharder])
    return dmp, plan


def tier_options(args, tables):
    """--tiers P,S: every table with more than --tier-min-ids ids gets ceil(P * ids) private and
    ceil(S * ids) shared rows (mpe_torch.torchrec's ``tiers`` option, the other fields default)."""
    if not args.tiers:
        return None
    p, s = args.tiers
    return {t.name: dict(tiers=dict(private_rows=math.ceil(p * t.num_embeddings),
                                    shared_rows=max(1, math.ceil(s * t.num_embeddings))))
            for t in tables if t.num_embeddings > args.tier_min_ids}


def fractions(text):
    try:
        p, s = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tiers {text!r}: give two fractions P,S (e.g. 0.02,0.1)") from None
    if not (0 <= p <= 1 and 0 < s <= 1):
        raise argparse.ArgumentTypeError(f"--tiers {text!r}: P must be in [0, 1] and S in (0, 1]")
    return p, s


def embedding_bytes(dmp, args, table_rows):
    if args.kernel == "mpe":
        import mpe_torch.torchrec as mt
        # Rows, cache and metadata, plus the tiered tables' maps (host bytes).
        mine = sum(m.memory()["embedding_bytes"] + m.memory()["tiers_bytes"] for m in dmp.modules()
                   if isinstance(m, mt.ShardedEmbeddingBagCollection))
    else:  # TorchRec's fused FP32 tables: this rank's shards
        mine = sum(p.numel() * p.element_size() for n, p in dmp.named_parameters() if "embedding_bags" in n)
        mine = 4 * args.dim * sum(table_rows) // dist.get_world_size() if mine == 0 else mine
    total = torch.tensor([mine], dtype=torch.int64)
    dist.all_reduce(total)
    return int(total.item())


def to_kjt(idx, off, B, lo, hi):
    """Samples [lo, hi) of a batch in the data helper's table-major CSR (26*B + 1 offsets, one
    bag per table and sample) as a KeyedJaggedTensor keyed cat_0 .. cat_25."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    lengths = (off[1:] - off[:-1]).view(NUM_CAT, B)[:, lo:hi]
    # Table t's bags of samples [lo, hi) are one run of idx: off[t*B + lo] .. off[t*B + hi].
    ends = off.tolist()
    values = torch.cat([idx[ends[t * B + lo]:ends[t * B + hi]] for t in range(NUM_CAT)])
    return KeyedJaggedTensor.from_lengths_sync(keys=[f"cat_{i}" for i in range(NUM_CAT)], values=values,
                                               lengths=lengths.reshape(-1))


def run(args):
    rank, world = init_process_group()
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    data = load_data(args)
    table_rows = list(data.table_rows)
    dmp, plan = build_model(args, table_rows, world)
    dense_params = [p for n, p in dmp.named_parameters() if "embedding_bags" not in n]
    opt = torch.optim.SGD(dense_params, lr=args.lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    src = data.train()
    steps, step_time, t_start = 0, 0.0, time.perf_counter()
    for dense, idx, off, labels, _ in batches(src, args.batch_size):
        B = labels.numel()
        if B < world:
            break
        lo, hi = rank * B // world, (rank + 1) * B // world
        kjt = to_kjt(idx, off, B, lo, hi)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        # Each rank's loss is the mean over its samples; DMP's DDP averages the dense
        # gradients over the ranks and TorchRec divides the embeddings' by the world size
        # (gradient division), so both train on the global batch's mean loss.
        logits = dmp(dense[lo:hi], kjt).squeeze(-1)
        loss_fn(logits, labels[lo:hi]).backward()
        opt.step()
        step_time += time.perf_counter() - t0
        steps += 1
    train_seconds = time.perf_counter() - t_start
    dmp.eval()
    ps, ys = [], []
    src = data.test()
    with torch.no_grad():
        for dense, idx, off, labels, _ in batches(src, 4096):
            B = labels.numel()
            lo, hi = rank * B // world, (rank + 1) * B // world
            ps.append(torch.sigmoid(dmp(dense[lo:hi], to_kjt(idx, off, B, lo, hi)).squeeze(-1)))
            ys.append(labels[lo:hi])
    p, y = torch.cat(ps), torch.cat(ys)
    sizes = [None] * world
    dist.all_gather_object(sizes, int(p.numel()))
    gathered_p = [torch.empty(n) for n in sizes]
    gathered_y = [torch.empty(n) for n in sizes]
    dist.all_gather(gathered_p, p)
    dist.all_gather(gathered_y, y)
    mem = embedding_bytes(dmp, args, table_rows)
    if rank == 0:
        p, y = torch.cat(gathered_p), torch.cat(gathered_y)
        res = dict(kernel=args.kernel, storage=args.storage if args.kernel == "mpe" else "fp32",
                   tiers=list(args.tiers) if args.kernel == "mpe" and args.tiers else None,
                   cache=args.cache if args.kernel == "mpe" else "none",
                   cache_fraction=args.cache_fraction if args.kernel == "mpe" and args.cache != "none" else 0.0,
                   world_size=world, dim=args.dim, seed=args.seed, logloss=log_loss(p, y), auc=roc_auc(p, y),
                   test_samples=int(y.numel()), step_ms=1000 * step_time / max(steps, 1),
                   train_seconds=train_seconds, embedding_bytes=mem,
                   plan={n: s.sharding_type for m in plan.plan.values() for n, s in m.items()})
        kinds = sorted(set(res["plan"].values()))
        tiers = f" tiers={args.tiers[0]},{args.tiers[1]}" if res["tiers"] else ""
        print(f"{args.kernel} {res['storage']} cache={res['cache']}:{res['cache_fraction']}{tiers} on {world} "
              f"process(es) "
              f"({'/'.join(kinds)}): log loss {res['logloss']:.5f}  AUC {res['auc']:.4f}  "
              f"step {res['step_ms']:.2f} ms  embedding memory {mem / 2**20:.2f} MiB")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
    dist.destroy_process_group()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", choices=["mpe", "fused"], default="mpe",
                    help="mpe's sharder, or TorchRec's default (fbgemm-gpu-cpu's fused FP32 TBE)")
    ap.add_argument("--storage", default="int8", help="mpe_torch.STORAGES")
    ap.add_argument("--cache", default="lru", help="mpe_torch.CACHES")
    ap.add_argument("--cache-fraction", type=float, default=0.05)
    ap.add_argument("--rounding", default="stochastic")
    ap.add_argument("--plan", choices=["table-wise", "column-wise", "planner"], default="table-wise",
                    help="table-wise: tables dealt largest first to the least loaded rank (the same for both "
                         "kernels); planner: TorchRec's planner (mpe's: mpe_torch.torchrec.planner) over "
                         "table- and column-wise")
    ap.add_argument("--tiers", type=fractions, default=None, metavar="P,S",
                    help="--kernel mpe: frequency tiers for every table with more than --tier-min-ids ids: "
                         "P and S of its ids as private and shared rows (e.g. 0.02,0.1)")
    ap.add_argument("--tier-min-ids", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=256, help="global batch (all processes together)")
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--emb-lr", type=float, default=None, help="default: --lr")
    ap.add_argument("--emb-init", type=float, default=0.05, help="tables start U(-x, x)")
    add_data_arguments(ap, train_samples=500000, test_samples=50000)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process (0 = torch's default)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.tiers and args.kernel != "mpe":
        ap.error("--tiers needs --kernel mpe (TorchRec's fused kernel has no frequency tiers)")
    if args.tier_min_ids < 0:
        ap.error(f"--tier-min-ids {args.tier_min_ids}: must be >= 0")
    if args.kernel == "mpe":
        require("mpe_torch", why="--kernel mpe")
    if args.emb_lr is None:
        args.emb_lr = args.lr
    return run(args)


if __name__ == "__main__":
    main()
