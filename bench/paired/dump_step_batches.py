# SPDX-License-Identifier: Apache-2.0
# Writes /tmp/batches.bin for pair_main.cpp (step modes): the 26 Criteo-shaped tables of the
# PyTorch example (python/examples/torch_dlrm.py, synthetic data at --scale 0.09, Zipf 1.05)
# and 53 training batches of B = 2048. Run from python/examples with the venv's python.
import sys, numpy as np
sys.argv=[sys.argv[0]]
sys.path.insert(0,'.')
import torch_dlrm as td
dm = td.load_data_module(False)
data = dm.synthetic(0.09, 1.05, 1.0, 1, 110000, 100000)
rows = np.array(list(data.table_rows), dtype=np.int64)
src = data.train()
out = []
for k in range(53):
    _, idx, off, _, _ = src.next(2048)
    out.append((idx.numpy().astype(np.int64), off.numpy().astype(np.int64)))
with open('/tmp/batches.bin','wb') as f:
    np.array([len(rows), len(out)], dtype=np.int64).tofile(f)
    rows.tofile(f)
    for idx, off in out:
        np.array([len(idx), len(off)], dtype=np.int64).tofile(f)
        idx.tofile(f); off.tofile(f)
print(rows.sum(), len(out), out[0][0].shape, out[0][1].shape, out[0][1][:5])
