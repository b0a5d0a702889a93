# SPDX-License-Identifier: Apache-2.0
import random

import pytest
import torch


def make_csr(table_rows, B, max_len, seed, empty_bags=True):
    """Random table-major CSR: (indices int64, offsets int64 of length T*B + 1)."""
    rng = random.Random(seed)
    idx, off = [], [0]
    for rows in table_rows:
        for _ in range(B):
            L = rng.randint(0 if empty_bags else 1, max_len)
            idx += [rng.randrange(rows) for _ in range(L)]
            off.append(len(idx))
    return torch.tensor(idx, dtype=torch.int64), torch.tensor(off, dtype=torch.int64)


@pytest.fixture
def csr():
    return make_csr
