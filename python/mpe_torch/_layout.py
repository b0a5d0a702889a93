# SPDX-License-Identifier: Apache-2.0
"""Bag layouts that mpe's table-major CSR input does not take directly.

mpe pools T tables over the same B bags each (offsets of length T*B + 1, output (B, sum D_t)).
Two inputs need another layout:

- **Variable batch per feature** (FBGEMM's VBE: ``batch_size_per_feature_per_rank`` B[f][r]):
  feature f has sum_r B[f][r] bags, rank 0's first, and the output is one dimension,
  rank-major: for r, for f, B[f][r] rows of D_f (the layout TorchRec's VBE all-to-all takes
  from FBGEMM's TBE).
- **Several features per table** (TorchRec's ``feature_names``): each feature is its own
  bag list over the same table.

Both are served by one plan: table t's bag list is its features' bags one after another (in
the input they are already adjacent), padded with empty bags to B_pad = max_t (bags of t);
mpe pools (B_pad, sum D_t), and one gather of the flattened output picks each feature's rows
in the order asked for. Padding bags are empty: they add nothing to any row's gradient, so
training gives the bits of the unpadded batch; their output gradient is zero (the gather's
backward).
"""
from collections import OrderedDict

import torch


class BagPlan:
    """Index tensors for one batch shape.

    Args:
        batch_per_feature: per feature, its bag counts per rank (``[[B]]`` without VBE).
        feature_table: per feature, its table (non-decreasing; every table has a feature).
        dims: per table, D_t.
        variable: True for VBE's one-dimensional rank-major output, False for (B, sum_f D_f).
    """

    def __init__(self, batch_per_feature, feature_table, dims, variable):
        T, F = len(dims), len(feature_table)
        bags_per_feature = [sum(b) for b in batch_per_feature]
        table_bags = [0] * T
        table_first = [None] * T
        first_in_table = []  # each feature's first bag within its table's bag list
        start = 0
        for f, t in enumerate(feature_table):
            if table_first[t] is None:
                table_first[t] = start
            first_in_table.append(table_bags[t])
            table_bags[t] += bags_per_feature[f]
            start += bags_per_feature[f]
        self.total_bags = start
        self.padded_batch = max(table_bags) if T else 0
        Bp = self.padded_batch
        cols = [0] * T
        for t in range(1, T):
            cols[t] = cols[t - 1] + dims[t - 1]
        dim_sum = sum(dims)
        # offsets index: table t's bag j is input bag first_t + min(j, n_t); the end is the total.
        j = torch.arange(Bp, dtype=torch.int64)
        parts = [table_first[t] + torch.clamp(j, max=table_bags[t]) for t in range(T)]
        parts.append(torch.tensor([self.total_bags], dtype=torch.int64))
        self.offsets_index = torch.cat(parts)  # (T*Bp + 1,)

        def block(f, row0, n):  # (n, D_f) flat positions of feature f's rows [row0, row0 + n)
            t = feature_table[f]
            rows = first_in_table[f] + row0 + torch.arange(n, dtype=torch.int64)
            return rows[:, None] * dim_sum + cols[t] + torch.arange(dims[t], dtype=torch.int64)[None, :]

        if variable:
            ranks = max(len(b) for b in batch_per_feature) if F else 0
            pieces = []
            for r in range(ranks):
                for f in range(F):
                    b = batch_per_feature[f]
                    pieces.append(block(f, sum(b[:r]), b[r]).reshape(-1))
            self.gather = torch.cat(pieces) if pieces else torch.empty(0, dtype=torch.int64)
            self.out_shape = (self.gather.numel(),)
        else:
            B = bags_per_feature[0] if F else 0
            self.gather = torch.cat([block(f, 0, B) for f in range(F)], dim=1).reshape(-1)
            self.out_shape = (B, sum(dims[t] for t in feature_table))
        self._on = {}  # (name, device) -> the index tensor copied there once

    def _index(self, name, device):
        """Index tensor ``name`` on ``device``: built on the host, copied to a CUDA device once
        per plan (later batches of this shape reuse the copy: no per-call host transfer)."""
        t = getattr(self, name)
        if device == t.device:
            return t
        key = (name, device)
        if key not in self._on:
            self._on[key] = t.to(device)
        return self._on[key]

    def offsets(self, offsets):
        """The padded table-major offsets ``(T*B_pad + 1,)`` from the input's ``offsets``, on
        their device."""
        return offsets.index_select(0, self._index("offsets_index", offsets.device))

    def output(self, pooled):
        """The output in the asked layout from mpe's ``(B_pad, sum D_t)`` ``pooled``, on its
        device."""
        return pooled.reshape(-1).index_select(0, self._index("gather", pooled.device)).view(self.out_shape)


class BagPlanCache:
    """The plans of the last few batch shapes (a training loop repeats a few)."""

    def __init__(self, feature_table, dims, size=8):
        self.feature_table, self.dims, self.size = list(feature_table), list(dims), size
        self._plans = OrderedDict()

    def get(self, batch_per_feature, variable):
        key = (variable, tuple(tuple(int(x) for x in b) for b in batch_per_feature))
        plan = self._plans.get(key)
        if plan is None:
            plan = BagPlan(key[1], self.feature_table, self.dims, variable)
            self._plans[key] = plan
            if len(self._plans) > self.size:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan
