#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-kernel time and DRAM traffic from an Nsight Compute CSV (bench/cuda/gpu_session.sh).

Input: the output of
  ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      --csv --print-units base --kernel-name-base demangled PROGRAM ...
(one row per kernel launch and metric). Output: one line per kernel (CachedEmbedding's
per-item functor for mpe's grid-stride kernels, else the kernel's short name) with launches,
total and mean time, DRAM bytes read and written per launch and the achieved DRAM GB/s,
longest total first, so one forward/backward/populate's time can be placed kernel by kernel.

usage: ncu_summary.py CSV [--copy-gbps X] [--skip-first N]
"""
import argparse
import collections
import csv
import re
import sys


def short_name(name):
    """mpe::detail::cuda_for_each_kernel<mpe::detail::PoolBags<...>>(...) -> PoolBags."""
    m = re.search(r"cuda_for_each(?:_lanes)?_kernel<(?:mpe::)?(?:detail::)?([A-Za-z_]\w*)", name)
    if m:
        return m.group(1)
    base = name.split("(")[0]
    base = re.sub(r"<.*", "", base)
    return base.split("::")[-1][:60] or name[:60]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--copy-gbps", type=float, default=0.0)
    ap.add_argument("--skip-first", type=int, default=0, help="launches to leave out (set-up)")
    a = ap.parse_args()
    lines = open(a.csv, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        print("no CSV header in", a.csv)
        print("\n".join(lines[-20:]))
        return 1
    rows = list(csv.DictReader(lines[start:]))
    launches = collections.OrderedDict()
    for r in rows:
        key = r.get("ID")
        name = r.get("Kernel Name", "?")
        metric = r.get("Metric Name", "")
        value = (r.get("Metric Value") or "0").replace(",", "")
        try:
            v = float(value)
        except ValueError:
            continue
        d = launches.setdefault(key, {"name": short_name(name), "full": name})
        d[metric] = v
    items = list(launches.values())[a.skip_first:]
    agg = collections.OrderedDict()
    for d in items:
        g = agg.setdefault(d["name"], {"n": 0, "ns": 0.0, "rd": 0.0, "wr": 0.0, "max_ns": 0.0})
        g["n"] += 1
        ns = d.get("gpu__time_duration.sum", 0.0)
        g["ns"] += ns
        g["max_ns"] = max(g["max_ns"], ns)
        g["rd"] += d.get("dram__bytes_read.sum", 0.0)
        g["wr"] += d.get("dram__bytes_write.sum", 0.0)
    total = sum(g["ns"] for g in agg.values()) or 1.0
    print(f"{len(items)} launches, {total / 1e6:.3f} ms in all")
    print(f"{'kernel':34} {'n':>5} {'total ms':>9} {'%':>5} {'mean us':>9} {'max us':>9} "
          f"{'rd MB/l':>8} {'wr MB/l':>8} {'GB/s':>7}" + ("  of copy" if a.copy_gbps else ""))
    for name, g in sorted(agg.items(), key=lambda kv: -kv[1]["ns"]):
        gbps = (g["rd"] + g["wr"]) / g["ns"] if g["ns"] else 0.0
        line = (f"{name[:34]:34} {g['n']:5d} {g['ns'] / 1e6:9.3f} {100 * g['ns'] / total:5.1f} "
                f"{g['ns'] / g['n'] / 1e3:9.1f} {g['max_ns'] / 1e3:9.1f} {g['rd'] / g['n'] / 1e6:8.2f} "
                f"{g['wr'] / g['n'] / 1e6:8.2f} {gbps:7.1f}")
        if a.copy_gbps:
            line += f"  {100 * gbps / a.copy_gbps:5.1f} %"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
