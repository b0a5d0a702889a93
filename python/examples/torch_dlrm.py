# SPDX-License-Identifier: Apache-2.0
"""The DLRM of examples/train_dlrm in PyTorch, with the 26 embedding tables in
mpe_torch.TableBatchedEmbeddingBags (or torch.nn.EmbeddingBag, or fbgemm_gpu's CPU TBE).

Same model, data and defaults as the C++ trainer (examples/train_dlrm/README.md):
  bottom MLP 13 -> 64 -> D (ReLU after every layer), 26 tables of dim D (sum pooling, one id per
  bag), pairwise dot interaction of {bottom output, 26 vectors} (strict upper triangle, 351
  values) concatenated with the bottom output, top MLP D + 351 -> 64 -> 1, sigmoid + BCE (mean
  over the batch), plain SGD with the same learning rate for the dense layers and the embeddings
  (--emb-lr to change the latter); dense init W ~ N(0, 2/(in+out)), b ~ N(0, 1/out); embeddings
  U(-0.05, 0.05) drawn by mpe's init_uniform with the C++ trainer's seed (so the mpe module starts
  from exactly the C++ trainer's embeddings; the nn.EmbeddingBag and fbgemm runs copy the same
  FP32 start). Data: the C++ trainer's own generator and Criteo reader (dlrm_data.cpp, compiled
  on first use), so the samples are the same: the synthetic Criteo-Kaggle-shaped stream (scale
  0.01, 1M training / 100k test samples by default) or --data FILE --test-fraction F.

  python python/examples/torch_dlrm.py --emb mpe --storage int8 --cache lru --cache-fraction 0.05
  python python/examples/torch_dlrm.py --emb mpe --storage fp32 --cache none
  python python/examples/torch_dlrm.py --emb nn
  python python/examples/torch_dlrm.py --data /work/shared/data/criteo-terabyte-day0-head1k.tsv --test-fraction 0.2
  python python/examples/torch_dlrm.py --bench 200 --emb fbgemm --emb-optimizer rowwise_adagrad

Needs: torch, mpe_torch, Eigen's headers (libeigen3-dev), and fbgemm_gpu (fbgemm-gpu-cpu) for
--emb fbgemm; a missing one is named with its install command at start (exit status 2;
python/README.md, Install). mpe_torch: pip install --no-build-isolation ./python, or
PYTHONPATH=build/python-site after cmake -P cmake/test_python.cmake. Eigen: the C++ data code
(dlrm_data.cpp) includes it from /usr/include/eigen3; the data helper is compiled once into
torch's extension cache (~1 minute).

Prints one result line (log loss, AUC, accuracy, step time, embedding memory) and, with
--json, writes it as a JSON record. The dense model's init differs in bits from the C++
trainer's (torch's generator, not the trainer's splitmix), so log losses agree statistically,
not bit for bit.
"""
import argparse
import json
import math
import os
import sys
import time

# mpe and torch share one OpenMP runtime (torch's libgomp), which reads this when loaded:
# on a machine with other work, actively spinning OpenMP workers cost mpe's calls 10-100x
# (measured on the 2 shared cores here: 350 ms vs 6 ms per embedding step).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from _needs import EIGEN, require  # noqa: E402

require("torch", "eigen")  # what importing this file (or its data helper, for torchrec_dlrm.py) needs

import torch  # noqa: E402
from torch import nn  # noqa: E402

NUM_DENSE, NUM_CAT = 13, 26
MASK = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def hash_combine(a, b):
    return splitmix64(a ^ splitmix64(b))


def load_data_module(verbose=False):
    from torch.utils.cpp_extension import load
    return load(name="mpe_dlrm_data", sources=[os.path.join(HERE, "dlrm_data.cpp")],
                extra_include_paths=[os.path.join(REPO, "examples", "train_dlrm"), EIGEN],
                extra_cflags=["-std=c++20", "-O2", "-fopenmp", "-g0"], extra_ldflags=["-fopenmp"],
                verbose=verbose)


def add_data_arguments(ap, train_samples=1000000, test_samples=100000):
    """The data options (shared with torchrec_dlrm.py): a Criteo-format file or the synthetic stream."""
    ap.add_argument("--data", help="Criteo-format file; the last --test-fraction of its lines is the test set")
    ap.add_argument("--test-fraction", type=float, default=0.1)
    ap.add_argument("--max-rows-per-table", type=int, default=1000000)
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--scale", type=float, default=0.01)
    ap.add_argument("--zipf", type=float, default=1.05)
    ap.add_argument("--effect-scale", type=float, default=1.0)
    ap.add_argument("--train-samples", type=int, default=train_samples)
    ap.add_argument("--test-samples", type=int, default=test_samples)
    ap.add_argument("--data-seed", type=int, default=1)


def batches(src, size):
    """The batches of a data helper Source, `size` samples each (the last one may be smaller)."""
    while True:
        batch = src.next(size)
        if batch is None:
            return
        yield batch


def load_data(args):
    """The data helper's Data for add_data_arguments' options."""
    dm = load_data_module(getattr(args, "verbose", False))
    if args.data:
        return dm.criteo_file(args.data, args.test_fraction, args.max_rows_per_table, args.strict)
    return dm.synthetic(args.scale, args.zipf, args.effect_scale, args.data_seed, args.train_samples,
                        args.test_samples)


class Dlrm(nn.Module):
    def __init__(self, dim, tables, bottom=(64,), top=(64,), seed=1):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        sizes_b = [NUM_DENSE, *bottom, dim]
        sizes_t = [dim + (tables + 1) * tables // 2, *top, 1]
        self.bottom = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes_b, sizes_b[1:]))
        self.top = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes_t, sizes_t[1:]))
        with torch.no_grad():
            for lin in list(self.bottom) + list(self.top):
                out, inp = lin.weight.shape
                lin.weight.normal_(0, math.sqrt(2.0 / (inp + out)), generator=g)
                lin.bias.normal_(0, math.sqrt(1.0 / out), generator=g)
        self.dim, self.tables = dim, tables
        iu = torch.triu_indices(tables + 1, tables + 1, 1)
        self.register_buffer("iu0", iu[0], persistent=False)
        self.register_buffer("iu1", iu[1], persistent=False)

    def forward(self, dense, emb):
        z = dense
        for lin in self.bottom:  # ReLU after every bottom layer, as DLRM
            z = torch.relu(lin(z))
        if self.tables == 0:
            x = z
        else:
            B = z.shape[0]
            v = torch.cat([z[:, None, :], emb.view(B, self.tables, self.dim)], dim=1)  # (B, T+1, D)
            gram = torch.bmm(v, v.transpose(1, 2))
            x = torch.cat([z, gram[:, self.iu0, self.iu1]], dim=1)
        for i, lin in enumerate(self.top):
            x = lin(x)
            if i + 1 < len(self.top):
                x = torch.relu(x)
        return x[:, 0]


class NnBags(nn.Module):
    """The 26 tables as one torch.nn.EmbeddingBag over all rows (row = table offset + id),
    sparse gradients; output (B, 26*D) like the TBE's."""

    def __init__(self, table_rows, dim, init_weights):
        super().__init__()
        self.bag = nn.EmbeddingBag(sum(table_rows), dim, mode="sum", sparse=True, include_last_offset=True)
        with torch.no_grad():
            self.bag.weight.copy_(torch.cat(init_weights))
        starts = torch.tensor([0] + list(table_rows[:-1]), dtype=torch.int64).cumsum(0)
        self.register_buffer("starts", starts, persistent=False)
        self.T, self.D = len(table_rows), dim

    def forward(self, indices, offsets):
        B = (offsets.numel() - 1) // self.T
        lengths = offsets[1:] - offsets[:-1]
        table = torch.arange(self.T).repeat_interleave(B).repeat_interleave(lengths)
        out = self.bag(indices + self.starts[table], offsets)  # (T*B, D), table-major
        return out.view(self.T, B, self.D).transpose(0, 1).reshape(B, self.T * self.D)


def make_fbgemm(table_rows, dim, init_weights, optimizer, lr):
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (ComputeDevice,
                                                                        SplitTableBatchedEmbeddingBagsCodegen)
    opt = {"sgd": EmbOptimType.EXACT_SGD, "rowwise_adagrad": EmbOptimType.EXACT_ROWWISE_ADAGRAD}[optimizer]
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(r, dim, EmbeddingLocation.HOST, ComputeDevice.CPU) for r in table_rows],
        optimizer=opt, learning_rate=lr, eps=1e-8, pooling_mode=PoolingMode.SUM)
    with torch.no_grad():
        for w, init in zip(tbe.split_embedding_weights(), init_weights):
            w.copy_(init)
    return tbe


def log_loss(p, y, eps=1e-7):
    q = p.double().clamp(eps, 1 - eps)
    return float(-(torch.where(y > 0.5, q.log(), (-q).log1p())).mean())


def roc_auc(score, y):
    """Mann-Whitney U with average ranks for ties (as metrics.hpp)."""
    s, order = torch.sort(score.double())
    yy = y[order].double()
    n = s.numel()
    ranks = torch.empty(n, dtype=torch.float64)
    i = 0
    s_list = s.tolist()
    while i < n:
        j = i
        while j < n and s_list[j] == s_list[i]:
            j += 1
        ranks[i:j] = 0.5 * (i + 1 + j)
        i = j
    pos = float(yy.sum())
    neg = n - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float(((ranks * yy).sum() - pos * (pos + 1) / 2) / (pos * neg))


def build_embedding(args, table_rows):
    """Returns (module, kind, memory dict or None, init weights list)."""
    import mpe_torch
    specs = [(int(r), args.dim) for r in table_rows]
    seed = hash_combine(args.seed, 0xE3B)  # the C++ trainer's embedding seed
    if args.emb == "mpe":
        cache_fraction = args.cache_fraction if args.cache != "none" else 0.0
        emb = mpe_torch.TableBatchedEmbeddingBags(
            specs, storage=args.storage, cache=args.cache, cache_fraction=cache_fraction, rounding=args.rounding,
            optimizer=args.emb_optimizer, learning_rate=args.emb_lr, pooling_mode="sum", seed=seed,
            weights_init=(-args.emb_init, args.emb_init))  # init_uniform(-e, e): the C++ trainer's start
        return emb, None
    # the same FP32 start as an mpe FP32 module with the C++ trainer's seed
    ref = mpe_torch.TableBatchedEmbeddingBags(specs, storage="fp32", seed=seed,
                                              weights_init=(-args.emb_init, args.emb_init))
    init = ref.split_embedding_weights()
    del ref
    if args.emb == "nn":
        emb = NnBags(list(table_rows), args.dim, init)
        if args.emb_optimizer == "sgd":
            opt = torch.optim.SGD(emb.parameters(), lr=args.emb_lr)
        else:  # torch has no row-wise Adagrad: element-wise Adagrad, sparse
            opt = torch.optim.Adagrad(emb.parameters(), lr=args.emb_lr, eps=1e-8)
        return emb, opt
    return make_fbgemm(table_rows, args.dim, init, args.emb_optimizer, args.emb_lr), None


def embedding_memory(emb, args, table_rows):
    if args.emb == "mpe":
        m = emb.memory()
        return m["embedding_bytes"]
    return 4 * args.dim * sum(table_rows)


def run(args):
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    data = load_data(args)
    table_rows = list(data.table_rows)
    print(f"data: {data.description}; {len(table_rows)} tables, {sum(table_rows)} rows", file=sys.stderr)
    emb, emb_opt = build_embedding(args, table_rows)
    if args.bench:
        return bench(args, emb, emb_opt, data, table_rows)
    model = Dlrm(args.dim, NUM_CAT, seed=args.seed)
    dense_opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.BCEWithLogitsLoss()
    src = data.train()
    steps, samples, loss_sum, step_time = 0, 0, 0.0, 0.0
    t_start = time.perf_counter()
    last_print = t_start
    for epoch in range(args.epochs):
        if epoch:
            src.reset()
        for dense, idx, off, labels, _ in batches(src, args.batch_size):
            t0 = time.perf_counter()
            dense_opt.zero_grad(set_to_none=True)
            if emb_opt is not None:
                emb_opt.zero_grad(set_to_none=True)
            e = emb(idx, off)
            loss = loss_fn(model(dense, e), labels)
            loss.backward()  # mpe / fbgemm: the embedding update happens here (fused)
            dense_opt.step()
            if emb_opt is not None:
                emb_opt.step()
            step_time += time.perf_counter() - t0
            steps += 1
            samples += labels.numel()
            loss_sum += float(loss.detach()) * labels.numel()
            now = time.perf_counter()
            if not args.quiet and now - last_print > 10:
                last_print = now
                print(f"  {samples}/{data.train_size * args.epochs} samples, {samples / (now - t_start):.0f}/s, "
                      f"loss {loss_sum / samples:.4f}", file=sys.stderr)
    train_seconds = time.perf_counter() - t_start
    # evaluation: eval mode -> mpe's forward_inference (reads only)
    model.eval()
    if isinstance(emb, nn.Module):
        emb.eval()
    ps, ys, pt = [], [], []
    src = data.test()
    with torch.no_grad():
        for dense, idx, off, labels, p_true in batches(src, 4096):
            ps.append(torch.sigmoid(model(dense, emb(idx, off).float())))
            ys.append(labels)
            pt.append(p_true)
    p, y = torch.cat(ps), torch.cat(ys)
    res = dict(emb=args.emb, storage=args.storage if args.emb == "mpe" else "fp32",
               cache=args.cache if args.emb == "mpe" else "none",
               cache_fraction=args.cache_fraction if args.emb == "mpe" and args.cache != "none" else 0.0,
               rounding=args.rounding if args.emb == "mpe" else "-", dim=args.dim, seed=args.seed, lr=args.lr,
               emb_lr=args.emb_lr, emb_optimizer=args.emb_optimizer, batch_size=args.batch_size,
               train_samples=samples, test_samples=int(y.numel()), logloss=log_loss(p, y), auc=roc_auc(p, y),
               accuracy=float(((p > 0.5).float() == y).float().mean()), train_loss=loss_sum / max(samples, 1),
               step_ms=1000 * step_time / max(steps, 1), train_seconds=train_seconds,
               embedding_bytes=embedding_memory(emb, args, table_rows), threads=torch.get_num_threads())
    ptrue = torch.cat(pt)
    if ptrue.numel() == y.numel():
        res["bayes_logloss"] = log_loss(ptrue, y)
    if args.emb == "mpe":
        s = emb.stats()
        res["hit_rate"] = s["hits"] / (s["hits"] + s["misses"]) if args.cache != "none" and s["hits"] + s["misses"] else None
        res["hits"], res["misses"] = s["hits"], s["misses"]
    print(f"{args.emb} {res['storage']} cache={res['cache']}:{res['cache_fraction']} {res['rounding']}: "
          f"log loss {res['logloss']:.5f}  AUC {res['auc']:.4f}  acc {res['accuracy']:.4f}  "
          f"step {res['step_ms']:.2f} ms  embedding memory {res['embedding_bytes'] / 2**20:.2f} MiB"
          + (f"  (Bayes-optimal {res['bayes_logloss']:.5f})" if "bayes_logloss" in res else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


def embedding_step(emb, emb_opt, idx, off, grad):
    """One embedding-only step: forward, backward of grad's first rows (a fixed gradient of
    the (B, 26*D) output), then emb_opt's step (None: the module's fused optimizer)."""
    if emb_opt is not None:
        emb_opt.zero_grad(set_to_none=True)
    out = emb(idx, off)
    out.backward(grad[:out.shape[0]])
    if emb_opt is not None:
        emb_opt.step()


def bench(args, emb, emb_opt, data, table_rows):
    """Embedding-only step time: forward, backward of a fixed random gradient, optimizer step,
    over the first args.bench training batches (after 10 warm-up steps)."""
    src = data.train()
    batches = []
    for _ in range(args.bench + 10):
        b = src.next(args.batch_size)
        if b is None:
            break
        batches.append(b)
    g = torch.Generator().manual_seed(0)
    grad = torch.randn(args.batch_size, NUM_CAT * args.dim, generator=g) * 1e-3
    times, cpu = [], []
    for k, (_, idx, off, _, _) in enumerate(batches):
        t0, c0 = time.perf_counter(), time.process_time()
        embedding_step(emb, emb_opt, idx, off, grad)
        if k >= 10:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    times.sort()
    cpu.sort()
    res = dict(emb=args.emb, storage=args.storage if args.emb == "mpe" else "fp32",
               cache=args.cache if args.emb == "mpe" else "none", emb_optimizer=args.emb_optimizer,
               dim=args.dim, batch_size=args.batch_size, steps=len(times),
               median_ms=1000 * times[len(times) // 2], mean_ms=1000 * sum(times) / len(times),
               median_cpu_ms=1000 * cpu[len(cpu) // 2],
               threads=torch.get_num_threads())
    print(f"bench {res['emb']} {res['storage']} cache={res['cache']} {args.emb_optimizer}: "
          f"median {res['median_ms']:.3f} ms (CPU {res['median_cpu_ms']:.3f} ms), mean {res['mean_ms']:.3f} ms per embedding step "
          f"({res['steps']} steps, B = {args.batch_size}, 26 tables x D = {args.dim}, {res['threads']} threads)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--emb", choices=["mpe", "nn", "fbgemm"], default="mpe",
                    help="embedding tables: mpe_torch (default), torch.nn.EmbeddingBag, or fbgemm_gpu's CPU TBE")
    ap.add_argument("--storage", choices=["fp32", "fp16", "int8", "int4"], default="int8")
    ap.add_argument("--cache", choices=["lru", "none"], default="lru")
    ap.add_argument("--cache-fraction", type=float, default=0.05)
    ap.add_argument("--rounding", choices=["stochastic", "nearest"], default="stochastic")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--emb-lr", type=float, default=None, help="default: --lr")
    ap.add_argument("--emb-optimizer", choices=["sgd", "rowwise_adagrad"], default="sgd")
    ap.add_argument("--emb-init", type=float, default=0.05)
    add_data_arguments(ap)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--bench", type=int, default=0, help="time N embedding-only steps instead of training")
    ap.add_argument("--json")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="show the data helper's compilation")
    args = ap.parse_args(argv)
    require("mpe_torch")  # every --emb: the FP32 start is mpe's init
    if args.emb == "fbgemm":
        require("fbgemm_gpu", why="--emb fbgemm")
    if args.emb_lr is None:
        args.emb_lr = args.lr
    if args.emb == "mpe" and args.cache == "none":
        args.cache_fraction = 0.0
    run(args)


if __name__ == "__main__":
    main()
