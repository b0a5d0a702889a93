#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes train_dlrm's invented CTR fixtures, one per --format, into a directory:

    python3 make_fixtures.py OUT_DIR [LINES]

criteo.tsv, libsvm.txt, libfm.txt, avazu.csv (with its header line), LINES samples each
(default 400). Every row is invented (no row of a real data set): sample i is a pure
function of i (splitmix64, no library RNG), its categorical values drawn from small
vocabularies, and its label ~ Bernoulli(sigmoid(logit)) with a logit that adds a hidden
effect of three fields' values, so a model that learns the categories beats predicting
the label mean. CTest's train_dlrm_format_* tests train on them.
"""
import math
import os
import sys

M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


class Rng:
    def __init__(self, seed):
        self.s = seed & M64

    def u64(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        return splitmix64(self.s)

    def uniform(self):
        return (self.u64() >> 11) / float(1 << 53)

    def below(self, n):
        return self.u64() % n


FIELDS = 6           # categorical fields of the libsvm/libfm fixtures
VOCAB = [6, 4, 3, 8, 30, 5]


def effect(field, value):
    """Hidden effect of a value of fields 0-2 (the others carry none)."""
    if field > 2:
        return 0.0
    scale = [2.5, 1.5, 1.0][field]
    return scale * (2.0 * Rng(1000 * field + value).uniform() - 1.0)


def sample(i):
    """(label, values per field, a count in [0, 1)) of sample i."""
    r = Rng(0xF1C7 ^ (i * 0x2545F4914F6CDD1D))
    values = [int(min(VOCAB[f] - 1, VOCAB[f] * r.uniform() ** 1.5)) for f in range(FIELDS)]
    count = r.uniform()
    logit = -0.8 + sum(effect(f, v) for f, v in enumerate(values))
    label = 1 if r.uniform() < 1.0 / (1.0 + math.exp(-logit)) else 0
    return label, values, count


def hex8(field, value):
    return "%08x" % (splitmix64((field << 32) | value) & 0xFFFFFFFF)


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    os.makedirs(out, exist_ok=True)
    rows = [sample(i) for i in range(n)]
    with open(os.path.join(out, "libsvm.txt"), "w") as f:
        # feature id = 100 * field + value; id 1000 carries the count as its value; labels -1/+1
        for y, vals, c in rows:
            feats = " ".join("%d:1" % (100 * k + v) for k, v in enumerate(vals))
            f.write("%s %s 1000:%.3f\n" % ("+1" if y else "-1", feats, c))
    with open(os.path.join(out, "libfm.txt"), "w") as f:
        # field:feature:value; field 5 is absent from every fourth sample (its missing row)
        for i, (y, vals, c) in enumerate(rows):
            toks = ["%d:%d:1" % (k, v) for k, v in enumerate(vals) if not (k == 5 and i % 4 == 0)]
            toks.append("%d:%d:%.3f" % (FIELDS, 0, c))
            f.write("%d %s\n" % (y, " ".join(toks)))
    with open(os.path.join(out, "avazu.csv"), "w") as f:
        cols = ["id", "click", "hour", "C1", "banner_pos", "site_id", "site_domain", "site_category", "app_id",
                "app_domain", "app_category", "device_id", "device_ip", "device_model", "device_type",
                "device_conn_type", "C14", "C15", "C16", "C17", "C18", "C19", "C20", "C21"]
        f.write(",".join(cols) + "\n")
        for i, (y, vals, c) in enumerate(rows):
            cats = [hex8(k, vals[k % FIELDS] if k < 12 else (vals[k % FIELDS] + k) % 3) for k in range(21)]
            hour = "141021%02d" % (i * 24 // n)
            f.write(",".join([str(10 ** 18 + i), str(y), hour] + cats) + "\n")
    with open(os.path.join(out, "criteo.tsv"), "w") as f:
        for i, (y, vals, c) in enumerate(rows):
            dense = [str(int(c * 100) * (j + 1)) if (i + j) % 7 else "" for j in range(13)]
            cats = [hex8(k, vals[k % FIELDS]) if (k < FIELDS or (i + k) % 5) else "" for k in range(26)]
            f.write("\t".join([str(y)] + dense + cats) + "\n")


if __name__ == "__main__":
    main()
