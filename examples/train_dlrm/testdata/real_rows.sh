#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Writes the real Avazu and Criteo rows that README.md's "Real rows" section trains on, from
# the public repository Lapis-Hong/Wide-ResDNN (its data/avazu and data/criteo samples, at a
# pinned commit). The rows are not part of mpe (their license is not stated); this script
# only fetches and arranges them.
#
#   sh real_rows.sh OUT_DIR [GIT_DIR]
#
# GIT_DIR: an existing clone (its .git) or bare copy of the repository; without it the
# script clones it (bare) into OUT_DIR/Wide-ResDNN.git. It writes
#   OUT_DIR/avazu_train.csv    data/avazu/train.csv (header line + 8087 rows)
#   OUT_DIR/avazu_holdout.csv  data/avazu/dev.csv then data/avazu/test.csv (912 rows, no header:
#                              the Kaggle layout)
#   OUT_DIR/criteo_train.tsv   data/criteo/train.csv (7200 rows, tab-separated Criteo format)
#   OUT_DIR/criteo_holdout.tsv data/criteo/dev.csv then data/criteo/test.csv (800 rows)
set -eu
out=${1:?usage: real_rows.sh OUT_DIR [GIT_DIR]}
commit=9889f939deb904a35692e2efdc6ab4f743a7df71
mkdir -p "$out"
if [ $# -ge 2 ]; then
  gd=$2
  [ -d "$gd/.git" ] && gd=$gd/.git
else
  gd=$out/Wide-ResDNN.git
  [ -d "$gd" ] || git clone --bare --quiet https://github.com/Lapis-Hong/Wide-ResDNN "$gd"
fi
show() { git --git-dir="$gd" show "$commit:data/$1"; }
show avazu/train.csv > "$out/avazu_train.csv"
{ show avazu/dev.csv; show avazu/test.csv; } > "$out/avazu_holdout.csv"
show criteo/train.csv > "$out/criteo_train.tsv"
{ show criteo/dev.csv; show criteo/test.csv; } > "$out/criteo_holdout.tsv"
wc -l "$out"/avazu_*.csv "$out"/criteo_*.tsv
