# SPDX-License-Identifier: Apache-2.0
"""The 26-table embedding training step of issue #17, FBGEMM's CPU TBE and mpe_torch side by
side in one process, interleaved step by step.

Every variant is built on the same FP32 start (mpe's init_uniform with the C++ trainer's seed,
as python/examples/torch_dlrm.py does) and runs the same batches of the same synthetic
Criteo-shaped stream: for each batch, each variant runs one embedding-only step (forward,
backward of a fixed random gradient, optimizer step; torch_dlrm.py's --bench step), the
variants' order rotating from batch to batch, so drift of the machine's speed (the 2-vCPU guest
drifts by up to 25 % within minutes) and the order within a batch fall on every variant alike.
Each step is timed by the thread's CPU time and by wall time; the first --warmup batches are
not counted.

Prints, per variant, the median ms per step and the median over batches of the ratio of its
step time to FBGEMM's on the same batch (and the ratio of the medians); --json writes them.

  PYTHONPATH=build/python-site OMP_NUM_THREADS=1 /opt/mpe-venv/bin/python \
      bench/torch_step/step_side_by_side.py --steps 200

Defaults are the issue's step: 26 tables (synthetic data at scale 0.09: 3.0M rows), D = 64,
B = 2048, one index per table per sample, Zipf 1.05, SGD, one thread.

Needs: torch, fbgemm_gpu (fbgemm-gpu-cpu: the reference TBE), mpe_torch (cmake -P
cmake/test_python.cmake builds it into build/python-site) and Eigen's headers (the data helper
of python/examples/torch_dlrm.py); a missing one is named with its install command at start
(exit status 2; python/README.md, Install).
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

require("torch", "fbgemm_gpu", "mpe_torch", "eigen")

import torch_dlrm  # noqa: E402  (sets OMP_WAIT_POLICY=PASSIVE before torch loads)
import torch  # noqa: E402

VARIANTS = {
    # name: (torch_dlrm --emb, storage, cache, cache fraction)
    "fbgemm": ("fbgemm", "fp32", "none", 0.0),
    "mpe_fp32": ("mpe", "fp32", "none", 0.0),
    "mpe_int8_lru5": ("mpe", "int8", "lru", 0.05),
    "mpe_fp16_lru5": ("mpe", "fp16", "lru", 0.05),
    "mpe_int4_lru1": ("mpe", "int4", "lru", 0.01),
}


def build(name, args, table_rows):
    emb_kind, storage, cache, fraction = VARIANTS[name]
    a = argparse.Namespace(**vars(args))
    a.emb, a.storage, a.cache, a.cache_fraction = emb_kind, storage, cache, fraction
    return torch_dlrm.build_embedding(a, table_rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="fbgemm,mpe_fp32,mpe_int8_lru5",
                    help="comma-separated, the first is the reference: " + ", ".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=200, help="timed batches")
    ap.add_argument("--warmup", type=int, default=20, help="batches run but not timed")
    ap.add_argument("--scale", type=float, default=0.09)
    ap.add_argument("--zipf", type=float, default=1.05)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--emb-optimizer", choices=["sgd", "rowwise_adagrad"], default="sgd")
    ap.add_argument("--emb-lr", type=float, default=0.3)
    ap.add_argument("--rounding", choices=["stochastic", "nearest"], default="stochastic")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    args.emb_init = 0.05
    names = [v for v in args.variants.split(",") if v]
    for v in names:
        if v not in VARIANTS:
            ap.error(f"--variants: unknown variant {v!r} (known: {', '.join(VARIANTS)})")
    if len(names) < 2:
        ap.error("--variants: at least two (the first is the reference)")
    if args.steps < 1 or args.warmup < 0:
        ap.error(f"--steps must be >= 1 and --warmup >= 0 (got {args.steps}, {args.warmup})")
    torch.set_num_threads(args.threads)
    dm = torch_dlrm.load_data_module()
    total = args.steps + args.warmup
    data = dm.synthetic(args.scale, args.zipf, 1.0, args.data_seed, total * args.batch_size, 1)
    table_rows = list(data.table_rows)
    src = data.train()
    batches = []
    for _ in range(total):
        b = src.next(args.batch_size)
        if b is None:
            break
        batches.append((b[1], b[2]))
    print(f"# data: {data.description}; {len(table_rows)} tables, {sum(table_rows)} rows, "
          f"{len(batches)} batches of {args.batch_size}", file=sys.stderr)
    mods = {v: build(v, args, table_rows) for v in names}
    g = torch.Generator().manual_seed(0)
    grad = torch.randn(args.batch_size, torch_dlrm.NUM_CAT * args.dim, generator=g) * 1e-3

    def step(v, idx, off):
        emb, opt = mods[v]
        c0, t0 = time.thread_time(), time.perf_counter()
        torch_dlrm.embedding_step(emb, opt, idx, off, grad)
        return 1e3 * (time.thread_time() - c0), 1e3 * (time.perf_counter() - t0)

    cpu = {v: [] for v in names}
    wall = {v: [] for v in names}
    for k, (idx, off) in enumerate(batches):
        order = names[k % len(names):] + names[:k % len(names)]
        for v in order:
            c, w = step(v, idx, off)
            if k >= args.warmup:
                cpu[v].append(c)
                wall[v].append(w)
    ref = names[0]
    res = dict(variants=names, reference=ref, steps=len(cpu[ref]), batch_size=args.batch_size, dim=args.dim,
               tables=len(table_rows), rows=sum(table_rows), zipf=args.zipf, optimizer=args.emb_optimizer,
               threads=torch.get_num_threads(), loadavg_end=os.getloadavg()[0], results={})
    print(f"# {len(cpu[ref])} timed batches (after {args.warmup}), B = {args.batch_size}, "
          f"{len(table_rows)} tables x D = {args.dim}, {args.emb_optimizer}, {res['threads']} thread(s); "
          f"thread CPU time per step; ratio = variant / {ref} on the same batch")
    for v in names:
        per = [c / r for c, r in zip(cpu[v], cpu[ref])]
        q = statistics.quantiles(per, n=4) if len(per) > 1 else [per[0]] * 3
        r = dict(median_cpu_ms=statistics.median(cpu[v]), median_wall_ms=statistics.median(wall[v]),
                 median_ratio=statistics.median(per),
                 ratio_of_medians=statistics.median(cpu[v]) / statistics.median(cpu[ref]),
                 ratio_q1=q[0], ratio_q3=q[2])
        res["results"][v] = r
        print(f"{v:16s} median {r['median_cpu_ms']:7.3f} ms (wall {r['median_wall_ms']:7.3f})  "
              f"ratio {r['median_ratio']:.3f} (quartiles {r['ratio_q1']:.3f} - {r['ratio_q3']:.3f}; "
              f"ratio of medians {r['ratio_of_medians']:.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
