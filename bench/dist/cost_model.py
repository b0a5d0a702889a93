#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Cost model of mpe's sharded embedding: all-to-all bytes per training step and memory
per rank against the rank count, table-wise vs row-wise vs column-wise, FP32 vs FP16/BF16
on the wire. Writes sharded_cost_model.{md,dat,png} (PNG via gnuplot) into OUT_DIR
(default: the current directory) and prints the Markdown table.

    python3 bench/dist/cost_model.py [OUT_DIR]
    python3 bench/dist/cost_model.py --check build/sharded_step.jsonl   # from bench/dist/run.sh

The byte counts are those of mpe::sharded::ShardedEmbedding's wire format (what
CommStats counts: bytes a rank sends to *other* ranks, forward + backward):
  forward, to each owner d: a 2 x int64 header, then [B_local, one int64 length per
  (piece on d, sample), one int64 per index routed to d]; the owner returns w bytes per
  element of each pooled vector (w = 4 FP32, 2 FP16/BF16);
  backward: the output gradient's columns of each piece go to its owner (w bytes each).
With --check the model is evaluated for the benchmark's own workload (26 Criteo-Kaggle
tables x 0.01, greedy table-wise plan) and compared with the measured bytes.

Assumptions at scale (stated in the output):
  T = 512 tables of R = 4,000,000 rows (2.05e9 rows), D = 128, pooling factor L = 10,
  weak scaling with b = 512 samples per rank per step, uniform ids (each row-wise block
  receives 1/N of a table's indices), Int8Rowwise store (D + 8 bytes per row, per column
  shard for column-wise), RowwiseAdagrad (4 bytes per row per shard), an FP32 cache of 1 %
  of each rank's rows (4 D_local + 17 bytes per slot); ranks = GPUs, one per rank.
  Table-wise cannot use more ranks than tables (N > T leaves ranks without tables);
  column-wise cannot use more ranks than columns (N > D leaves ranks without columns):
  the model then places one shard per rank and the remaining ranks hold nothing.
  Time column: bytes / 25 GB/s per rank (one 200 Gb/s NIC per GPU), latency ignored.
"""
import json
import math
import os
import subprocess
import sys




def bytes_per_step(kind, N, b, T, L, D, w):
    """Bytes one rank sends to other ranks per step (forward + backward), as a dict, for
    row-wise and column-wise plans (every rank holds a piece of each of the T tables).
    Table-wise (tables spread evenly, T/N per rank on average) is the closed form in
    at_scale(): index (N-1) x 24 + 8 b (T/N)(1+L)(N-1); vectors 2 w D (T/N) b (N-1)."""
    if N == 1:
        return {"index": 0.0, "vector": 0.0}
    header = 16 + 8  # 2 x int64 sizes, B_local
    if kind == "row":
        idx = (N - 1) * header + 8 * b * T * (N - 1) + 8 * b * T * L * (N - 1) / N
        vec = 2 * w * D * T * b * (N - 1)
        return {"index": idx, "vector": vec}
    if kind == "column":
        shards = min(N, D)
        # every column shard receives all of the table's indices and lengths
        idx = (shards - 1) * (header + 8 * b * T * (1 + L)) if N <= D else (N - 1) * header + 8 * b * T * (1 + L) * shards * (N - 1) / N
        vec = 2 * w * (D / shards) * T * b * (shards - 1) if N <= D else 2 * w * D * T * b * (N - 1) / N
        return {"index": idx, "vector": vec}
    raise ValueError(kind)


def memory_per_rank(kind, N, T, R, D, cache_frac=0.01):
    """Max bytes on one rank: store + optimizer + cache."""
    def cost(tables, rows, dl):
        r = tables * rows
        return r * (dl + 8) + 4 * r + cache_frac * r * (4 * dl + 17)
    if kind == "table":
        return cost(math.ceil(T / N), R, D)
    if kind == "row":
        return cost(T, math.ceil(R / N), D)
    if kind == "column":
        return cost(T, R, math.ceil(D / min(N, D)))
    raise ValueError(kind)


def at_scale(out_prefix):
    T, R, D, L, b = 512, 4_000_000, 128, 10, 512
    Ns = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    bw = 25e9
    rows = []
    for N in Ns:
        rec = {"N": N}
        for kind in ("table", "row", "column"):
            for wname, w in (("fp32", 4), ("fp16", 2)):
                if kind == "table":
                    # average over ranks, closed form of bytes_per_step (uniform tables)
                    idx = (N - 1) * 24 + 8 * b * (T / N) * (1 + L) * (N - 1)
                    vec = 2 * w * D * (T / N) * b * (N - 1)
                    bs = {"index": idx, "vector": vec}
                else:
                    bs = bytes_per_step(kind, N, b, T, L, D, w)
                rec[f"{kind}_{wname}"] = bs["index"] + bs["vector"]
            rec[f"{kind}_mem"] = memory_per_rank(kind, N, T, R, D)
        rows.append(rec)
    cols = ["table_fp32", "table_fp16", "row_fp32", "row_fp16", "column_fp32", "column_fp16"]
    with open(out_prefix + ".dat", "w") as f:
        f.write("# N " + " ".join(cols) + " table_mem row_mem column_mem\n")
        for r in rows:
            f.write(f"{r['N']} " + " ".join(f"{r[c]:.6g}" for c in cols) +
                    f" {r['table_mem']:.6g} {r['row_mem']:.6g} {r['column_mem']:.6g}\n")
    gib = 1024.0 ** 3
    mib = 1024.0 ** 2
    with open(out_prefix + ".md", "w") as f:
        f.write("Assumptions: T = 512 tables x 4,000,000 rows, D = 128, L = 10, b = 512 samples per rank per step "
                "(weak scaling), uniform ids, Int8Rowwise + RowwiseAdagrad + 1 % FP32 cache per rank; "
                "bytes = sent by one rank to other ranks per step (forward + backward); time = bytes / 25 GB/s.\n\n")
        f.write("| ranks | table-wise MiB/step (fp32 / fp16 wire) | row-wise | column-wise | a2a ms/step at 25 GB/s (table / row / column, fp32) | memory per rank GiB (table / row / column) |\n")
        f.write("|---:|---:|---:|---:|---:|---:|\n")
        for r in rows:
            f.write(f"| {r['N']} | {r['table_fp32']/mib:.1f} / {r['table_fp16']/mib:.1f} | "
                    f"{r['row_fp32']/mib:.1f} / {r['row_fp16']/mib:.1f} | "
                    f"{r['column_fp32']/mib:.1f} / {r['column_fp16']/mib:.1f} | "
                    f"{1e3*r['table_fp32']/bw:.1f} / {1e3*r['row_fp32']/bw:.1f} / {1e3*r['column_fp32']/bw:.1f} | "
                    f"{r['table_mem']/gib:.2f} / {r['row_mem']/gib:.2f} / {r['column_mem']/gib:.2f} |\n")
    script = f"""
set terminal pngcairo size 1200,520 font 'sans,10'
set output '{out_prefix}.png'
set multiplot layout 1,2 title "mpe sharded embedding cost model: T=512 x 4M rows, D=128, L=10, 512 samples/rank/step, Int8 + Adagrad + 1% cache"
set logscale xy
set grid
set xlabel 'ranks (GPUs)'
set xrange [8:4096]
set xtics (8, 32, 128, 512, 2048, 4096)
set key top left font ',9'
set ylabel 'all-to-all MiB sent per rank per step (fwd + bwd)'
plot '{out_prefix}.dat' u 1:($2/1048576) w lp lc 1 pt 7 t 'table-wise, fp32 wire', \\
     '' u 1:($3/1048576) w lp lc 1 dt 2 pt 6 t 'table-wise, fp16/bf16 wire', \\
     '' u 1:($4/1048576) w lp lc 2 pt 7 t 'row-wise, fp32', \\
     '' u 1:($5/1048576) w lp lc 2 dt 2 pt 6 t 'row-wise, fp16/bf16', \\
     '' u 1:($6/1048576) w lp lc 3 pt 7 t 'column-wise, fp32', \\
     '' u 1:($7/1048576) w lp lc 3 dt 2 pt 6 t 'column-wise, fp16/bf16'
set ylabel 'memory per rank, GiB (store + Adagrad + cache)'
set key bottom left
plot '{out_prefix}.dat' u 1:($8/1073741824) w lp lc 1 pt 7 t 'table-wise (floor: one table)', \\
     '' u 1:($9/1073741824) w lp lc 2 pt 7 t 'row-wise', \\
     '' u 1:($10/1073741824) w lp lc 3 pt 7 t 'column-wise (floor: D/N >= 1 column; per-shard Adagrad state)'
unset multiplot
"""
    try:
        subprocess.run(["gnuplot"], input=script.encode(), check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"warning: gnuplot failed ({e}); no PNG written", file=sys.stderr)


KAGGLE = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
          5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]


def check(jsonl):
    """Model vs measured for the benchmark's workload (exact for table- and column-wise:
    the bytes depend only on counts; row-wise indices depend on where the ids fall)."""
    print("| ranks | plan | wire | measured index B/step | model | measured vector B/step | model |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for line in open(jsonl):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        N, D, L, B = r["ranks"], r["dim"], r["pooling"], r["global_batch"]
        w = 4 if r["precision"] == "fp32" else 2
        rows = [max(2, round(c * 0.01)) for c in KAGGLE]
        T = len(rows)
        bl = [B * (k + 1) // N - B * k // N for k in range(N)]
        if r["plan"] == "table":
            # greedy by bytes, largest first, least-loaded rank (ties: lower rank)
            load = [0] * N
            owner = [0] * T
            for t in sorted(range(T), key=lambda t: -rows[t]):
                d = min(range(N), key=lambda k: (load[k], k))
                owner[t] = d
                load[d] += rows[t]
            Td = [owner.count(d) for d in range(N)]
            idx = sum(24 + 8 * bl[me] * Td[d] * (1 + L) for me in range(N) for d in range(N) if d != me)
            vec = sum(2 * w * D * Td[d] * bl[me] for me in range(N) for d in range(N) if d != me)
        elif r["plan"] == "column":
            Dl = [D // N + (1 if k < D % N else 0) for k in range(N)]
            idx = sum(24 + 8 * bl[me] * T * (1 + L) for me in range(N) for d in range(N) if d != me)
            vec = sum(2 * w * Dl[d] * T * bl[me] for me in range(N) for d in range(N) if d != me)
        elif r["plan"] == "row":
            idx = sum(24 + 8 * bl[me] * T + 8 * bl[me] * T * L / N for me in range(N) for d in range(N) if d != me)
            vec = sum(2 * w * D * T * bl[me] for me in range(N) for d in range(N) if d != me)
        else:
            continue
        if N == 1:
            idx = vec = 0
        print(f"| {N} | {r['plan']} | {r['precision']} | {r['a2a_index_bytes_per_step']:.0f} | {idx:.0f}"
              f"{' (uniform ids)' if r['plan'] == 'row' else ''} | {r['a2a_vector_bytes_per_step']:.0f} | {vec:.0f} |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
    else:
        out_dir = sys.argv[1] if len(sys.argv) == 2 else "."
        os.makedirs(out_dir, exist_ok=True)
        at_scale(os.path.join(out_dir, "sharded_cost_model"))
        print(open(os.path.join(out_dir, "sharded_cost_model.md")).read())
