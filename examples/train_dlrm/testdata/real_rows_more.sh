#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Writes the real iPinYou and MovieLens-100k rows that README.md's "Real rows" section
# trains on, from two public repositories at pinned commits: wnzhang/deep-ctr (its data/
# iPinYou sample, already one-hot indexed) and RUCAIBox/RecBole (its dataset/ml-100k atomic
# files). The rows are not part of mpe (deep-ctr states no license; MovieLens is under the
# GroupLens terms); this script only fetches and arranges them (python3, standard library).
#
#   sh real_rows_more.sh OUT_DIR [DEEPCTR_GIT_DIR [RECBOLE_GIT_DIR]]
#
# *_GIT_DIR: an existing clone (its .git) or bare copy of the repository; without it the
# script clones it (bare) into OUT_DIR/deep-ctr.git or OUT_DIR/RecBole.git. It writes
#   OUT_DIR/ipinyou_train.svm     data/train.fm.txt (26,773 rows, `label id:1 ...`, libsvm)
#   OUT_DIR/ipinyou_holdout.svm   data/test.fm.txt (21,150 rows)
#   OUT_DIR/ipinyou_bounds.txt    the --field-bounds of the 16 fields: the first feature id
#                                 of fields 2-16, read from data/featindex.fm.txt (each field
#                                 a contiguous id range there; checked)
#   OUT_DIR/movielens_train.fm    90,000 of the 100,000 ratings (libfm, see below)
#   OUT_DIR/movielens_holdout.fm  the other 10,000
# MovieLens rows: label 1 when rating >= 4, else 0. Fields (libfm `field:feature:1`):
#   0 user id, 1 item id, 2 age bucket (<18, 18-24, 25-34, 35-44, 45-49, 50-55, 56+: the
#   MovieLens-1M buckets), 3 gender, 4 occupation, 5 zip code's first 3 characters,
#   6 release year (no feature when empty), 7 genres (multi-hot: one feature per genre of the
#   movie, each weight 1, summed in the bag).
# A field's feature ids number its values in sorted order from 0. Split: random with a fixed
# key, not by time (the last 10 % by timestamp holds 166 users, 7,114 of its 10,000 ratings
# from users with no training rating): the ratings sorted by SHA-256 of "user_id item_id",
# the last 10,000 held out; training rows keep that (shuffled) order.
set -eu
out=${1:?usage: real_rows_more.sh OUT_DIR [DEEPCTR_GIT_DIR [RECBOLE_GIT_DIR]]}
deepctr_commit=229ad52cb97bc213012ba596b451990dcca6b897
recbole_commit=7b02be5ec80a88310f2d04a27a82adfcbb5dc211
mkdir -p "$out"
git_dir() {  # $1: given dir or empty, $2: clone URL, $3: default bare dir
  if [ -n "$1" ]; then
    if [ -d "$1/.git" ]; then echo "$1/.git"; else echo "$1"; fi
  else
    [ -d "$3" ] || git clone --bare --quiet "$2" "$3"
    echo "$3"
  fi
}
dg=$(git_dir "${2:-}" https://github.com/wnzhang/deep-ctr "$out/deep-ctr.git")
rg=$(git_dir "${3:-}" https://github.com/RUCAIBox/RecBole "$out/RecBole.git")

# iPinYou
dshow() { git --git-dir="$dg" show "$deepctr_commit:data/$1"; }
dshow train.fm.txt > "$out/ipinyou_train.svm"
dshow test.fm.txt > "$out/ipinyou_holdout.svm"
dshow featindex.fm.txt | awk -F'\t' '
  { i = index($1, ":"); f = substr($1, 1, i - 1); id = $2 + 0
    if (!(f in lo)) { order[++n] = f; lo[f] = id; hi[f] = id }
    if (id < lo[f]) lo[f] = id
    if (id > hi[f]) hi[f] = id
    cnt[f]++ }
  END {
    b = ""
    for (k = 1; k <= n; ++k) {
      f = order[k]
      if (hi[f] - lo[f] + 1 != cnt[f]) { print "field " f " is not a contiguous id range" > "/dev/stderr"; exit 1 }
      if (k > 1) {
        if (lo[f] != hi[order[k - 1]] + 1) { print "field " f " does not follow " order[k - 1] > "/dev/stderr"; exit 1 }
        b = b (k > 2 ? "," : "") lo[f]
      }
    }
    print b
  }' > "$out/ipinyou_bounds.txt"

# MovieLens-100k
rshow() { git --git-dir="$rg" show "$recbole_commit:dataset/ml-100k/ml-100k.$1"; }
rshow inter > "$out/ml-100k.inter"
rshow user > "$out/ml-100k.user"
rshow item > "$out/ml-100k.item"
python3 - "$out" <<'EOF'
import hashlib, sys
out = sys.argv[1]

def rows(name):
    with open(f"{out}/ml-100k.{name}", encoding="latin-1") as f:
        lines = f.read().splitlines()
    return [l.split("\t") for l in lines[1:] if l]  # line 1: the atomic header

def age_bucket(a):
    a = int(a)
    for top, name in ((17, "<18"), (24, "18-24"), (34, "25-34"), (44, "35-44"), (49, "45-49"), (55, "50-55")):
        if a <= top:
            return name
    return "56+"

users = {r[0]: [age_bucket(r[1]), r[2], r[3], r[4][:3]] for r in rows("user")}
items = {r[0]: [r[2], r[3].split()] for r in rows("item")}
inter = rows("inter")
# field -> sorted values -> id
values = [set() for _ in range(8)]
for r in inter:
    u, i = users[r[0]], items[r[1]]
    for f, v in enumerate([r[0], r[1], *u, i[0]]):
        if v != "":
            values[f].add(v)
    values[7].update(i[1])
ids = [{v: k for k, v in enumerate(sorted(vs))} for vs in values]

def line(r):
    u, i = users[r[0]], items[r[1]]
    feats = [(f, v) for f, v in enumerate([r[0], r[1], *u, i[0]]) if v != ""]
    feats += [(7, g) for g in i[1]]
    label = 1 if float(r[2]) >= 4 else 0
    return f"{label} " + " ".join(f"{f}:{ids[f][v]}:1" for f, v in feats) + "\n"

inter.sort(key=lambda r: hashlib.sha256(f"{r[0]} {r[1]}".encode()).digest())
n_test = len(inter) // 10
with open(f"{out}/movielens_train.fm", "w") as f:
    f.writelines(line(r) for r in inter[:-n_test])
with open(f"{out}/movielens_holdout.fm", "w") as f:
    f.writelines(line(r) for r in inter[-n_test:])
print("movielens fields (values):", ", ".join(
    f"{n} {len(v)}" for n, v in zip(("user", "item", "age", "gender", "occupation", "zip3", "year", "genre"), values)))
EOF
rm "$out/ml-100k.inter" "$out/ml-100k.user" "$out/ml-100k.item"
echo "ipinyou --field-bounds $(cat "$out/ipinyou_bounds.txt")"
wc -l "$out"/ipinyou_*.svm "$out"/movielens_*.fm
