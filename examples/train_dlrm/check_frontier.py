#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks a `train_dlrm --sweep frontier --json F` file (CTest train_dlrm_frontier_json):
every record has the frontier's fields; memory_ratio is the fp32 record's memory_bytes over
the record's own; memory_bytes is store + cache + metadata + optimizer state; the fp32
record's paired log-loss delta is 0 and every other delta is the mean of its runs' paired
deltas against the fp32 runs of the same seeds; the hashed configs (@h<k>) exist and store
fewer bytes as k grows. With --trains (file input) the fp32 record's log loss must also be
below its label_mean_logloss, the test log loss of predicting the training positive rate.

    python3 check_frontier.py [--trains] frontier.json
"""
import json
import math
import sys

args = sys.argv[1:]
trains = "--trains" in args
args = [a for a in args if a != "--trains"]
recs = json.load(open(args[0]))
errors = []
need = ["config", "memory_bytes", "memory_ratio", "logloss", "logloss_delta_pct", "auc", "dim", "runs"]
by = {r["config"]: r for r in recs}
fp32 = by.get("fp32")
if fp32 is None:
    sys.exit("no fp32 record")
fp32_ll = {run["seed"]: run["logloss"] for run in fp32["runs"]}
for r in recs:
    for k in need:
        if k not in r:
            errors.append(f"{r.get('config')}: no field {k}")
    if r["config"] == "dense-only":
        continue
    parts = r["store_bytes"] + r["cache_bytes"] + r["metadata_bytes"] + r["optimizer_bytes"]
    if r["memory_bytes"] != parts:
        errors.append(f"{r['config']}: memory_bytes {r['memory_bytes']} != parts {parts}")
    want = fp32["memory_bytes"] / r["memory_bytes"]
    if not math.isclose(r["memory_ratio"], want, rel_tol=1e-12):
        errors.append(f"{r['config']}: memory_ratio {r['memory_ratio']} != {want}")
    deltas = [100.0 * (run["logloss"] - fp32_ll[run["seed"]]) / fp32_ll[run["seed"]] for run in r["runs"]]
    want_d = sum(deltas) / len(deltas)
    if not math.isclose(r["logloss_delta_pct"], want_d, rel_tol=1e-9, abs_tol=1e-12):
        errors.append(f"{r['config']}: logloss_delta_pct {r['logloss_delta_pct']} != {want_d}")
if fp32["memory_ratio"] != 1 or fp32["logloss_delta_pct"] != 0:
    errors.append("fp32: ratio must be 1 and delta 0")
small = [r for r in recs if r["config"].endswith(f"@d{max(1, fp32['dim'] // 4)}")]
if not small or any(r["dim"] != max(1, fp32["dim"] // 4) for r in small):
    errors.append("the D/4 configs are missing or have the wrong dim")
hashed = [r for r in recs if r["config"].startswith("int4+stlru1%/sr@h") and "@md" not in r["config"]]
if len(hashed) != 3 or any(r["large_hash"] < 2 or r["large_dim"] != fp32["dim"] for r in hashed):
    errors.append("the hashed configs (@h2, @h3, @h4) are missing or not hashed")
by_k = sorted(hashed, key=lambda r: r["large_hash"])
if any(a["store_bytes"] <= b["store_bytes"] for a, b in zip(by_k, by_k[1:])):
    errors.append("a larger @h<k> must store fewer bytes")
if trains:
    base = fp32.get("label_mean_logloss")
    if base is None:
        errors.append("--trains: the records have no label_mean_logloss (file input only)")
    elif not fp32["logloss"] < base:
        errors.append(f"fp32 log loss {fp32['logloss']:.5f} is not below the label-mean {base:.5f}: it did not learn")
    else:
        print(f"check_frontier: fp32 log loss {fp32['logloss']:.5f} < label-mean {base:.5f}")
if errors:
    print("\n".join(errors))
    sys.exit(1)
print(f"check_frontier: {len(recs)} records consistent; best ratio "
      f"{max(r['memory_ratio'] or 0 for r in recs if r['config'] != 'dense-only'):.2f}x")
