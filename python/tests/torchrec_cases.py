# SPDX-License-Identifier: Apache-2.0
"""Shared by test_torchrec.py and the processes it spawns: the models, batches and plans of
the TorchRec tests, and the one-process reference (mpe_torch.TableBatchedEmbeddingBags over
the whole collection on the global batch)."""
import os
import socket
import zlib
import traceback

import torch
import torch.distributed as dist

import mpe_torch


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def table_configs(case):
    import torchrec
    from torchrec.modules.embedding_configs import PoolingType
    pooling = PoolingType.MEAN if case.get("pooling") == "mean" else PoolingType.SUM
    return [torchrec.EmbeddingBagConfig(name=name, embedding_dim=dim, num_embeddings=rows,
                                        feature_names=list(feats), pooling=pooling,
                                        weight_init_min=-0.05 * (1 + zlib.crc32(name.encode()) % 3),
                                        weight_init_max=0.04 * (1 + zlib.crc32(name.encode()) % 2))
            for name, rows, dim, feats in case["tables"]]


def features(case):
    return [f for (_, _, _, feats) in case["tables"] for f in feats]


def feature_rows(case):
    return [rows for (_, rows, _, feats) in case["tables"] for _ in feats]


def _generator(case, step, name, salt):
    return torch.Generator().manual_seed(1_000_003 * case.get("batch_seed", 1) + 1009 * step + salt +
                                         zlib.crc32(name.encode()))


def global_batch(case, step, world):
    """Per feature, the global batch's bags (a list of index tensors), rank 0's B first, and
    the per-sample weights; the same in every process. Each feature draws from its own stream
    (keyed by its name), so a subset of the tables sees the same bags."""
    bags, weights = [], []
    for f, (name, rows) in enumerate(zip(features(case), feature_rows(case))):
        g = _generator(case, step, name, 0)
        fb = []
        for r in range(world):
            for _ in range(batch_sizes(case, f, world)[r]):
                n = int(torch.randint(0, 5, (1,), generator=g))
                # Zipf-like: small ids repeat, so rows meet within and across ranks.
                fb.append((torch.rand(n, generator=g) ** 3 * rows).long().clamp_(max=rows - 1))
        bags.append(fb)
        weights.append([torch.rand(len(b), generator=g) for b in fb])
    return bags, weights


def batch_sizes(case, f, world):
    return case.get("vbe", {}).get(f, [case["batch"]] * world)


def local_kjt(case, step, rank, world):
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    bags, weights = global_batch(case, step, world)
    keys, lengths, values, wts, stride_per_rank = features(case), [], [], [], []
    for f in range(len(keys)):
        sizes = batch_sizes(case, f, world)
        lo = sum(sizes[:rank])
        mine = bags[f][lo:lo + sizes[rank]]
        lengths += [len(b) for b in mine]
        values += mine
        wts += weights[f][lo:lo + sizes[rank]]
        stride_per_rank.append([sizes[rank]])
    kw = dict(keys=keys, values=torch.cat(values) if values else torch.empty(0, dtype=torch.int64),
              lengths=torch.tensor(lengths, dtype=torch.int64))
    if case.get("weighted"):
        kw["weights"] = torch.cat(wts) if wts else torch.empty(0)
    if case.get("vbe"):
        # TorchRec's VBE: each feature's own bags, and per sample of the (B,) batch the bag it
        # reads (inverse_indices: sample b of feature f reads bag b mod B[f][r]).
        kw["stride_per_key_per_rank"] = stride_per_rank
        kw["inverse_indices"] = (keys, inverse_indices(case, rank, world))
        return KeyedJaggedTensor(**kw)
    return KeyedJaggedTensor.from_lengths_sync(**kw)


def inverse_indices(case, rank, world):
    B = case["batch"]
    return torch.stack([torch.arange(B) % batch_sizes(case, f, world)[rank] for f in range(len(features(case)))])


def upstream_grad(case, step, rows):
    """The loss's gradient for the global batch's (rows, sum_f D_f) output (per feature from
    its own stream)."""
    dims = [dim for (_, _, dim, feats) in case["tables"] for _ in feats]
    return torch.cat([torch.randn(rows, d, generator=_generator(case, step, name, 1))
                      for name, d in zip(features(case), dims)], dim=1)


def reference(case, world, steps, division=True, keys=None):
    """One TableBatchedEmbeddingBags over the whole collection, trained on the global batch:
    per step its output (global B, sum D) and after all steps each table's weights. Table
    configs must have one feature each. ``keys``: the tables' row keys when they are a part of
    a larger collection."""
    cfgs = table_configs(case)
    # A tiered table (table_options' "tiers"): an mpe_torch.TieredRows over its ids in front of
    # its private + shared rows, mapping each step's global batch of the table once.
    maps = {t: mpe_torch.TieredRows(ids=c.num_embeddings, **case["table_options"][c.name]["tiers"])
            for t, c in enumerate(cfgs) if "tiers" in case.get("table_options", {}).get(c.name, {})}
    specs = [(maps[t].physical_rows if t in maps else c.num_embeddings, c.embedding_dim) for t, c in enumerate(cfgs)]
    if keys is None:  # each table's row 0 in the collection
        keys = [0]
        for rows, _ in specs[:-1]:
            keys.append(keys[-1] + rows)
    opts = dict(case["options"])
    tbe = mpe_torch.TableBatchedEmbeddingBags(specs, pooling_mode=case.get("pooling", "sum"), row_keys=keys, **opts)
    tbe.init_uniform([c.weight_init_min for c in cfgs], [c.weight_init_max for c in cfgs])
    B = case["batch"] * world
    outs = []
    for step in range(steps):
        bags, weights = global_batch(case, step, world)
        lengths = torch.tensor([len(b) for fb in bags for b in fb], dtype=torch.int64)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
        per_table = [torch.cat(fb) if fb else torch.empty(0, dtype=torch.int64) for fb in bags]
        for t, m in maps.items():
            per_table[t] = m(per_table[t])
            m.copy_moved_rows(tbe, t)
        values = torch.cat(per_table)
        psw = torch.cat([w for fw in weights for w in fw]) if case.get("weighted") else None
        out = tbe(values, offsets, psw)
        outs.append(out.detach().clone())
        grad = upstream_grad(case, step, B)
        if division:
            grad = grad / world
        out.backward(grad)
    tbe.maps = {cfgs[t].name: m for t, m in maps.items()}
    return outs, {c.name: tbe.get_weights(t) for t, c in enumerate(cfgs)}, tbe


def run_worker(rank, world, port, case, out_dir, body, backend="gloo"):
    """Runs body(rank, world, case) in a process group of ``backend`` (gloo; "cpu:gloo,cuda:nccl"
    for the CUDA tests) and saves what it returns (or its traceback) to out_dir/rank<r>.pt."""
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    result = {}
    try:
        dist.init_process_group(backend, rank=rank, world_size=world)
        result = body(rank, world, case)
    except BaseException:
        result = {"error": traceback.format_exc()}
    finally:
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn(body, case, world, out_dir, backend="gloo"):
    """Runs body on `world` processes; returns each rank's result dict (raises on an error)."""
    import torch.multiprocessing as mp
    port = free_port()
    try:
        mp.start_processes(run_worker, args=(world, port, case, str(out_dir), body, backend), nprocs=world, join=True,
                           start_method="spawn")
    except mp.ProcessExitedException:
        pass  # a rank died before saving its result: reported below
    results = []
    for r in range(world):
        path = os.path.join(out_dir, f"rank{r}.pt")
        results.append(torch.load(path, weights_only=False) if os.path.exists(path) else
                       {"error": "the process died without a result"})
    errors = [f"rank {r} failed:\n{res['error']}" for r, res in enumerate(results) if "error" in res]
    if errors:
        raise AssertionError("\n".join(errors))
    return results


def build_dmp(case, world, device=None):
    """DMP over the case's EBC with mpe's sharder, on ``device`` (default CPU; ``cuda:r`` puts
    rank r's kernels on its GPU)."""
    import torchrec
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.types import ShardingEnv
    import mpe_torch.torchrec as mt
    ebc = torchrec.EmbeddingBagCollection(tables=table_configs(case), device=torch.device("meta"),
                                          is_weighted=bool(case.get("weighted")))
    sharder = mt.EmbeddingBagCollectionSharder(fused_params=case["options"], table_options=case.get("table_options"))
    per_table = {name: (mt.table_wise(spec[1]) if spec[0] == "tw" else mt.column_wise(spec[1]))
                 for name, spec in case["plan"].items()}
    device = torch.device("cpu") if device is None else torch.device(device)
    plan = mt.sharding_plan(ebc, per_table, sharder, world, compute_device=device.type)
    model = DistributedModelParallel(ebc, env=ShardingEnv.from_process_group(dist.group.WORLD),
                                     device=device, plan=plan, sharders=[sharder])
    return model


def sharded_module(model):
    import mpe_torch.torchrec as mt
    for m in model.modules():
        if isinstance(m, mt.ShardedEmbeddingBagCollection):
            return m
    raise AssertionError("no mpe ShardedEmbeddingBagCollection in the model")


def local_weights(model):
    """{table: [(row0, col0, (local_rows, local_cols) float32)]} of this rank's shards."""
    out = {}
    for k in sharded_module(model).kernels():
        for t, w in zip(k._tables, k.weights()):
            off = t.local_metadata.shard_offsets
            out.setdefault(t.name, []).append((off[0], off[1], w.cpu()))
    return out


def train_steps(model, case, rank, world, steps, first=0, device=None):
    """``steps`` training steps; returns each step's output on the CPU. ``device``: where the
    batch and the gradient go (the DMP's device; default the CPU)."""
    outs = []
    B = case["batch"]
    for step in range(first, first + steps):
        kjt = local_kjt(case, step, rank, world)
        kt = model(kjt if device is None else kjt.to(device))
        out = torch.cat([kt[f] for f in features(case)], dim=1)  # the KeyedTensor's keys come in plan order
        outs.append(out.detach().cpu().clone())
        grad = upstream_grad(case, step, B * world)[rank * B:(rank + 1) * B]
        (out * (grad if device is None else grad.to(device))).sum().backward()
    return outs


def train_body(rank, world, case):
    from torchrec.distributed.comm_ops import set_gradient_division
    set_gradient_division(case.get("division", True))
    model = build_dmp(case, world)
    outs = train_steps(model, case, rank, world, case["steps"])
    sharded = sharded_module(model)
    return dict(outs=outs, weights=local_weights(model), memory=sharded.memory(),
                tiers={name: [(m.stats(), m.get_extra_state()) for m in ms] for name, ms in sharded.tiers().items()})


def train_many_body(rank, world, case):
    """train_body for each option set of case["variants"] in turn (one process group)."""
    out = []
    for options in case["variants"]:
        out.append(train_body(rank, world, {**case, "options": options}))
    return dict(variants=out)


def shard_reference(case, world, steps, division=True):
    """The reference for a plan whose column-wise tables are stored per column slice: one
    TableBatchedEmbeddingBags whose tables are the plan's shards (a column-wise table's
    slices side by side, keyed by their rows and columns in the collection); returns the
    global outputs and {table: [(row0, col0, weights)]} per shard."""
    cfgs = table_configs(case)
    specs, row_keys, col_keys, lows, highs, pieces = [], [], [], [], [], []
    key = 0
    for c in cfgs:
        kind = case["plan"][c.name][0]
        if kind == "cw":  # column_wise(ranks): equal slices, in rank-list order
            ranks = case["plan"][c.name][1]
            width = c.embedding_dim // len(ranks)
            so = [((c.num_embeddings, width), (0, i * width)) for i in range(len(ranks))]
        else:
            so = [((c.num_embeddings, c.embedding_dim), (0, 0))]
        for (rows, cols), (r0, c0) in so:
            specs.append((rows, cols))
            row_keys.append(key + r0)
            col_keys.append(c0)
            lows.append(c.weight_init_min)
            highs.append(c.weight_init_max)
            pieces.append((c.name, r0, c0))
        key += c.num_embeddings
    tbe = mpe_torch.TableBatchedEmbeddingBags(specs, pooling_mode=case.get("pooling", "sum"), row_keys=row_keys,
                                              column_keys=col_keys, **case["options"])
    tbe.init_uniform(lows, highs)
    B = case["batch"] * world
    outs = []
    table_of_piece = [cfgs.index(next(c for c in cfgs if c.name == p[0])) for p in pieces]
    for step in range(steps):
        bags, weights = global_batch(case, step, world)
        per_table = [bags[t] for t in table_of_piece]
        lengths = torch.tensor([len(b) for fb in per_table for b in fb], dtype=torch.int64)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
        values = torch.cat([b for fb in per_table for b in fb])
        psw = torch.cat([w for t in table_of_piece for w in weights[t]]) if case.get("weighted") else None
        out = tbe(values, offsets, psw)
        outs.append(out.detach().clone())
        grad = upstream_grad(case, step, B)
        out.backward(grad / world if division else grad)
    weights = {}
    for i, (name, r0, c0) in enumerate(pieces):
        weights.setdefault(name, []).append((r0, c0, tbe.get_weights(i)))
    return outs, weights
