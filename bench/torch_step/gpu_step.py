# SPDX-License-Identifier: Apache-2.0
"""mpe_torch's training step on a CUDA device at the GPU point, beside torch's own FP32
EmbeddingBag in the same process.

    python3 bench/torch_step/gpu_step.py [--json FILE] [--steps 50] [--rows 10000000]

GPU point (bench/README.md): one table of --rows rows, D = 128, B = 65,536 bags of L = 32
indices (2,097,152 lookups per batch), sum pooling, Zipf 1.05 over the rows (ids shuffled
so hot rows are scattered), SGD, stochastic rounding. Variants: mpe_torch INT8 + 5 % Lru
cache, mpe_torch INT8 store only, and torch.nn.EmbeddingBag (FP32, sparse gradient, SGD
step) as the baseline. A step is forward + backward of a fixed random gradient of the
pooled output (+ optimizer.step() for the baseline); its time is measured with CUDA events
on torch's current stream over --steps steps after --warmup steps, median of --rounds rounds,
the variants' order rotating round by round. Prints one line per variant and, with --json,
writes {"device", "torch", "cases": {name: {"ms", "steps_per_s"}}}.

Needs: torch with a visible CUDA device and mpe_torch built with its CUDA module
(mpe_torch.built_with_cuda()); a missing one is named at start (exit status 2).
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python", "examples"))
from _needs import require  # noqa: E402

require("torch", "mpe_torch")


def zipf_ids(torch, n, rows, s, gen, device):
    # Inverse-CDF sampling of a truncated Zipf(s) over ranks 1..rows on the device, then a
    # fixed permutation of the ranks (hot rows scattered over the table).
    ranks = torch.arange(1, rows + 1, device=device, dtype=torch.float64)
    cdf = torch.cumsum(ranks.pow(-s), 0)
    cdf /= cdf[-1].clone()
    u = torch.rand(n, generator=gen, device=device, dtype=torch.float64)
    r = torch.searchsorted(cdf, u).clamp_(max=rows - 1)
    perm = torch.randperm(rows, generator=gen, device=device)
    return perm[r]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=65_536)
    ap.add_argument("--pooling-factor", type=int, default=32)
    ap.add_argument("--zipf", type=float, default=1.05)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    import mpe_torch
    if not torch.cuda.is_available() or not mpe_torch.built_with_cuda():
        print("gpu_step: needs a CUDA device (torch.cuda.is_available()) and mpe_torch's CUDA module "
              "(mpe_torch.built_with_cuda())", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(1)
    n = a.batch * a.pooling_factor
    indices = zipf_ids(torch, n, a.rows, a.zipf, gen, dev)
    offsets = torch.arange(0, n + 1, a.pooling_factor, device=dev, dtype=torch.int64)
    grad = torch.randn(a.batch, a.dim, generator=gen, device=dev)

    variants = {
        "mpe_int8_lru5": mpe_torch.TableBatchedEmbeddingBags(
            [(a.rows, a.dim)], storage="int8", cache="lru", cache_fraction=0.05, optimizer="sgd",
            learning_rate=0.01, device=dev),
        "mpe_int8_store_only": mpe_torch.TableBatchedEmbeddingBags(
            [(a.rows, a.dim)], storage="int8", optimizer="sgd", learning_rate=0.01, device=dev),
    }
    base = torch.nn.EmbeddingBag(a.rows, a.dim, mode="sum", sparse=True, device=dev)
    base_opt = torch.optim.SGD(base.parameters(), lr=0.01)

    def step(name):
        if name == "torch_fp32_embedding_bag":
            base_opt.zero_grad(set_to_none=True)
            base(indices, offsets[:-1]).backward(grad)
            base_opt.step()
        else:
            variants[name](indices, offsets).backward(grad)

    names = list(variants) + ["torch_fp32_embedding_bag"]
    times = {k: [] for k in names}
    for r in range(a.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for _ in range(a.warmup):
                step(name)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(a.steps):
                step(name)
            stop.record()
            stop.synchronize()
            times[name].append(start.elapsed_time(stop) / a.steps)
    out = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "point": {"rows": a.rows, "dim": a.dim, "batch": a.batch, "pooling_factor": a.pooling_factor,
                     "zipf": a.zipf}, "cases": {}}
    for name in names:
        ms = statistics.median(times[name])
        out["cases"][name] = {"ms": round(ms, 4), "steps_per_s": round(1e3 / ms, 1)}
        print(f"{name:28s} {ms:9.3f} ms/step  {1e3 / ms:8.1f} steps/s   ({out['device']})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
