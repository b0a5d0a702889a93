#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Markdown tables from bench_embedding_cuda's console output (--benchmark_counters_tabular).

Reads the text reports of bench/cuda/gpu_session.sh (bench_gpu.txt, bench_base.txt; a run
cut off by its timeout still parses up to its last line) and prints one row per benchmark:
time per call, GB/s, the fraction of the device copy bandwidth measured in the same
process, the cache hit rate, or steps per second for the pipelined steps.

    python3 bench/cuda/summarize.py gpu-out/bench_gpu.txt     # gpu_session.sh's output folder
    python3 bench/cuda/summarize.py --json bench/cuda/h100.json --commit SHA gpu-out/bench_gpu.txt
    python3 bench/cuda/summarize.py --json h100.json --commit SHA --torch-step gpu-out/torch_step.json gpu-out/bench_gpu.txt

With --json FILE, the headline cases of the GPU point (CASES below) are also written to FILE
as one JSON object: the device, the copy bandwidth measured in the same process, the date,
the commit, and per case the ms per call (per step for the pipelined step), GB/s and the
fractions of the datasheet's bandwidth (H200 4.8 TB/s, H100 3.35 TB/s; DATASHEET_BPS) and of
the measured copy bandwidth. --torch-step FILE adds bench/torch_step/gpu_step.py's JSON (the
mpe_torch training step at the GPU point) under "mpe_torch_step".
"""
import datetime
import json
import re
import sys

UNITS = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def number(tok):
    m = re.fullmatch(r"([0-9.eE+-]+)([kMGTmun]?)", tok)
    return float(m.group(1)) * UNITS[m.group(2)] if m else None


def parse(path):
    header, rows, context = None, [], {}
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        m = re.match(r"^(mpe_\w+|device \w.*): (.*)$", line)
        if m:
            context[m.group(1)] = m.group(2)
        if line.startswith("Benchmark "):
            header = line.split()
            continue
        if header is None or not line or line.startswith("-") or " " not in line:
            continue
        tok = line.split()
        name = tok[0]
        if "/" not in name:
            continue
        # name, time, unit, cpu, unit, iterations, counters...
        vals = {"time_ms": float(tok[1]) * {"ms": 1, "us": 1e-3, "ns": 1e-6, "s": 1e3}[tok[2]]}
        for key, t in zip(header[4:], tok[6:]):
            vals[key] = number(t)
        rows.append((name, vals))
    return context, rows


def short(name):
    name = name.replace("/manual_time", "")
    name = re.sub(r"B:(\d+)/L:(\d+)/D:(\d+)/rows:(\d+)/dist:(\d)/cache_pm:(\d+)",
                  lambda m: f"B={m[1]} L={m[2]} D={m[3]} rows={int(m[4]):,} "
                            f"{['uniform', 'zipf1.05', 'zipf1.2'][int(m[5])]} cache={int(m[6]) / 10:g}%",
                  name)
    return name


# Memory bandwidth by the vendor's datasheets, bytes per second, by a word of the device name.
DATASHEET_BPS = {"H200": 4.8e12,  # H200 SXM, HBM3e
                 "H100": 3.35e12}  # H100 SXM5 80 GB, HBM3


def datasheet_bps(device):
    """The datasheet bandwidth of a device name ("NVIDIA H100 80GB HBM3"), or None."""
    return next((bps for word, bps in DATASHEET_BPS.items() if word in device), None)


GPU_POINT = "B:65536/L:32/D:128/rows:10000000"
CASES = {  # case -> (benchmark name prefix, dist, cache per mille)
    "forward_int8_store_only_uniform": ("gpu/cuda/forward/int8_rowwise/lru32/device", 0, 0),
    "forward_int4_store_only_uniform": ("gpu/cuda/forward/int4_rowwise/lru32/device", 0, 0),
    "forward_int8_cache5_zipf1.05": ("gpu/cuda/forward/int8_rowwise/lru32/device", 1, 50),
    "backward_int8_store_only_uniform": ("gpu/cuda/backward/int8_rowwise/lru32/device", 0, 0),
    "backward_int8_cache5_zipf1.05": ("gpu/cuda/backward/int8_rowwise/lru32/device", 1, 50),
    "populate_int8_cache5_uniform": ("gpu/cuda/populate/int8_rowwise/lru32/device", 0, 50),
    "populate_int8_cache5_zipf1.05": ("gpu/cuda/populate/int8_rowwise/lru32/device", 1, 50),
    "step_int8_cache5_zipf1.05": ("gpu/sync/cuda/step/int8_rowwise/lru32/device", 1, 50),
}


def write_json(out, commit, reports):
    context, rows = {}, []
    for path in reports:
        c, r = parse(path)
        context.update(c)
        rows += r
    copy_bps = float(context.get("mpe_hbm_copy_GBps", "nan")) * 1e9
    device = context.get("mpe_cuda_device", "unknown")
    sheet = datasheet_bps(device)
    doc = {"device": device, "copy_GBps": copy_bps / 1e9,
           "datasheet_GBps": sheet / 1e9 if sheet else None, "date": datetime.date.today().isoformat(),
           "commit": commit, "cases": {}}
    for case, (prefix, dist, pm) in CASES.items():
        name = f"{prefix}/{GPU_POINT}/dist:{dist}/cache_pm:{pm}/manual_time"
        for n, v in rows:
            if n != name:
                continue
            sps = v.get("steps_per_second")
            ms = v["time_ms"] / 16 if sps else v["time_ms"]
            gbs = v.get("bytes_per_second")
            entry = {"benchmark": n, "ms": round(ms, 4)}
            if gbs:
                entry["GBps"] = round(gbs / 1e9, 1)
                if sheet:
                    entry["fraction_of_datasheet"] = round(gbs / sheet, 4)
                entry["fraction_of_copy"] = round(gbs / copy_bps, 4)
            if sps:
                entry["steps_per_second"] = round(sps, 1)
            doc["cases"][case] = entry
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main(paths):
    if paths and paths[0] == "--json":
        out, commit, torch_step, paths = paths[1], "unknown", None, paths[2:]
        if paths and paths[0] == "--commit":
            commit, paths = paths[1], paths[2:]
        if paths and paths[0] == "--torch-step":
            torch_step, paths = paths[1], paths[2:]
        write_json(out, commit, paths)
        if torch_step:  # bench/torch_step/gpu_step.py's cases, under "mpe_torch_step"
            with open(out, encoding="utf-8") as f:
                doc = json.load(f)
            with open(torch_step, encoding="utf-8") as f:
                doc["mpe_torch_step"] = json.load(f)
            with open(out, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1)
                f.write("\n")
    for path in paths:
        context, rows = parse(path)
        print(f"\n{path}: " + ", ".join(f"{k} {v}" for k, v in context.items()
                                         if k in ("mpe_cuda_device", "mpe_hbm_copy_GBps", "mpe_h2d_pinned_GBps")))
        print("\n| benchmark | ms per call | GB/s | of copy BW | hit rate | steps/s |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, v in rows:
            gbs = v.get("bytes_per_second")
            frac = v.get("fraction_of_hbm")
            hit = v.get("hit_rate")
            sps = v.get("steps_per_second")
            ms = v["time_ms"] / 16 if sps else v["time_ms"]  # a step benchmark times 16 steps
            cells = [f"{ms:.3f}", f"{gbs / 1e9:.1f}" if gbs else "-",
                     f"{100 * frac:.2f} %" if frac is not None else "-",
                     f"{hit:.3f}" if hit is not None else "-", f"{sps:.1f}" if sps else "-"]
            print(f"| {short(name)} | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main(sys.argv[1:])
