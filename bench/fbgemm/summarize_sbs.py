#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Summarizes fbgemm_side_by_side outputs: for each (precision, rows, dist) and variant, the
median over processes (files) of the per-process median call times and ratios to FBGEMM.

usage: summarize_sbs.py LABEL=file1,file2,file3 [LABEL=...]   (a markdown table per label)
"""
import statistics
import sys

COLS = ("prec,rows,D,dist,variant,B,L,median_ms,min_ms,ratio_vs_fbgemm,cpu_median_ms,cpu_ratio_vs_fbgemm,"
        "Midx_per_s,useful_GBps,seq_fraction,gather_fraction,max_abs_diff,bound,agree,order_ratio_vs_fbgemm").split(",")


def read(path):
    rows, limits, loads = [], [], []
    for line in open(path):
        if line.startswith("CSV,limits"):
            limits.append([float(x) for x in line.strip().split(",")[2:]])
        elif line.startswith("CSV,") and not line.startswith("CSV,prec"):
            parts = line.strip().split(",")[1:]
            if len(parts) == len(COLS):
                rows.append(dict(zip(COLS, parts)))
            elif len(parts) == len(COLS) - 1:  # an output without the order-balanced ratio
                d = dict(zip(COLS, parts))
                d["order_ratio_vs_fbgemm"] = "nan"
                rows.append(d)
            elif len(parts) == len(COLS) - 3:  # an output without the CPU-time columns
                d = dict(zip([c for c in COLS if not c.startswith("cpu_") and c != "order_ratio_vs_fbgemm"], parts))
                d["cpu_median_ms"] = d["cpu_ratio_vs_fbgemm"] = d["order_ratio_vs_fbgemm"] = "nan"
                rows.append(d)
        elif line.startswith("# loadavg"):
            loads.append(line.split(":", 1)[1].split()[0])
    return rows, limits, loads


def med(v):
    v = [x for x in v if x == x]
    return statistics.median(v) if v else float("nan")


def main():
    for arg in sys.argv[1:]:
        label, files = arg.split("=", 1)
        data = {}
        lim, loads = [], []
        for f in files.split(","):
            rows, limits, l = read(f)
            lim += limits
            loads += l
            for r in rows:
                key = (r["prec"], int(r["rows"]), r["dist"], r["variant"])
                data.setdefault(key, []).append(r)
        print(f"\n### {label}\n")
        if lim:
            print(f"limits (median of {len(lim)} processes): sequential read {med([x[0] for x in lim]):.2f} GB/s, "
                  f"random-line gather {med([x[1] for x in lim]):.1f} M lines/s; 1-min load at process "
                  f"start/end: {', '.join(loads)}\n")
        print("| format | rows | dist | variant | median ms (wall) | ratio wall (min-max) | CPU ms | ratio CPU (min-max)"
              " | order-balanced (min-max) | GB/s | seq frac | gather frac | agree |")
        print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        order = {"fp32": 0, "fp16": 1, "int8": 2, "int4": 3}
        for key in sorted(data, key=lambda k: (order.get(k[0], 9), k[1], k[2], k[3] != "fbgemm", k[3])):
            rs = data[key]
            f = lambda c: [float(r[c]) for r in rs]
            rw, rc, ro = f("ratio_vs_fbgemm"), f("cpu_ratio_vs_fbgemm"), f("order_ratio_vs_fbgemm")
            rng = lambda v: f"{min(v):.2f}-{max(v):.2f}" if all(x == x for x in v) else "-"
            print(f"| {key[0]} | {key[1] // 1000000}M | {key[2]} | {key[3]} | {med(f('median_ms')):.3f} | "
                  f"**{med(rw):.2f}** ({rng(rw)}) | {med(f('cpu_median_ms')):.3f} | **{med(rc):.2f}** ({rng(rc)}) | "
                  f"{med(ro):.2f} ({rng(ro)}) | "
                  f"{med(f('useful_GBps')):.2f} | {med(f('seq_fraction')):.3f} | {med(f('gather_fraction')):.3f} | "
                  f"{'yes' if all(r['agree'] == '1' for r in rs) else 'NO'} |")


if __name__ == "__main__":
    main()
