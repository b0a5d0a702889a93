#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Markdown tables from Google Benchmark JSON (run with --benchmark_repetitions=N):
median of the N repetitions and the spread (coefficient of variation of the time) per
benchmark. Usage: summarize.py FILE.json [FILE.json ...] [--filter REGEX]"""
import json
import re
import sys


def load(paths):
    rows = {}
    order = []
    for p in paths:
        with open(p) as f:
            data = json.load(f)
        for b in data["benchmarks"]:
            if b.get("run_type") != "aggregate":
                continue
            name = b["run_name"]
            if name not in rows:
                rows[name] = {}
                order.append(name)
            rows[name][b["aggregate_name"]] = b
    return order, rows


def si(x, unit=""):
    for f, s in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:
            return f"{x / f:.3g}{s}{unit}"
    return f"{x:.3g}{unit}"


def main():
    args = sys.argv[1:]
    flt = None
    if "--filter" in args:
        i = args.index("--filter")
        flt = re.compile(args[i + 1])
        del args[i : i + 2]
    order, rows = load(args)
    cols = [
        ("indices_per_second", "Mindex/s", lambda v: f"{v / 1e6:.2f}"),
        ("indices_per_cpu_second", "Mindex/CPU-s", lambda v: f"{v / 1e6:.2f}"),
        ("bytes_per_second", "bytes/s", lambda v: si(v)),
        ("fraction_of_limit", "frac_gather", lambda v: f"{v:.3f}"),
        ("fraction_of_stream", "frac_stream", lambda v: f"{v:.3f}"),
        ("hit_rate", "hit_rate", lambda v: f"{v:.3f}"),
        ("transfer_bytes_per_step", "transfer B/step", lambda v: si(v)),
    ]
    print("| benchmark | median ms | cv | " + " | ".join(c[1] for c in cols) + " |")
    print("|---|---|---|" + "---|" * len(cols))
    for name in order:
        if flt and not flt.search(name):
            continue
        r = rows[name]
        med = r.get("median")
        if med is None:
            continue
        cv = r.get("cv")
        cvs = f"{cv['real_time'] * 100:.1f}%" if cv else "-"
        t = med["real_time"]
        unit = med.get("time_unit", "ms")
        t_ms = t if unit == "ms" else t / 1e3 if unit == "us" else t / 1e6 if unit == "ns" else t * 1e3
        cells = []
        for key, _, fmt in cols:
            cells.append(fmt(med[key]) if key in med else "")
        short = name.replace("/manual_time", "")
        print(f"| {short} | {t_ms:.3f} | {cvs} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
