# SPDX-License-Identifier: Apache-2.0
"""mpe_torch.planned_memory: the bytes a module will hold, from its arguments alone.

  * every built combination (``built_combinations()``), on a mixed-D spec (three D-groups,
    rows not a multiple of the 32 ways, one group whose cache exceeds its rows), with every
    optimizer: equal to ``TableBatchedEmbeddingBags(...).memory()`` after one training step
    (forward + backward of a small batch), key by key, workspace_bytes 0 in the plan (and
    total_bytes = the module's total less its workspace); before the step the module holds
    no optimizer state. Also with row_keys, column_keys and slot_index;
  * a 10**9-row table is planned at once (nothing proportional to the rows is allocated);
  * the constructor's refusals: the same exception type and message for bad names, a
    combination that is not built, bad specs and bad keys.
"""
import re
import time

import pytest
import torch

import mpe_torch

SPECS = [(50, 8), (37, 5), (20, 8), (3, 16), (90, 5)]  # groups D = 8, 5, 16
KEYS = ["store_bytes", "cache_bytes", "optimizer_bytes", "metadata_bytes", "embedding_bytes"]


def _combo_args(combo):
    storage, cache, rounding, state_precision = combo.split("/")
    return dict(storage=storage, cache=cache, cache_fraction=0.0 if cache == "none" else 0.4, rounding=rounding,
                state_precision=state_precision)


def _train_one_step(module, specs, csr):
    indices, offsets = csr([r for r, _ in specs], 3, 4, seed=5, empty_bags=False)
    out = module(indices, offsets)
    out.sum().backward()
    assert module.step == 1


def _check(plan, memory):
    assert set(plan) == set(memory)
    for key in KEYS:
        assert plan[key] == memory[key], key
    assert plan["workspace_bytes"] == 0
    assert plan["total_bytes"] == memory["total_bytes"] - memory["workspace_bytes"]


@pytest.mark.parametrize("combo", mpe_torch.built_combinations())
def test_equals_memory_after_one_step(combo, csr):
    args = _combo_args(combo)
    for optimizer in mpe_torch.OPTIMIZERS:
        plan = mpe_torch.planned_memory(SPECS, optimizer=optimizer, **args)
        module = mpe_torch.TableBatchedEmbeddingBags(SPECS, optimizer=optimizer, learning_rate=0.01, **args)
        before = module.memory()
        assert before["optimizer_bytes"] == 0
        for key in ("store_bytes", "cache_bytes", "metadata_bytes"):
            assert plan[key] == before[key], (optimizer, key)
        module.init_uniform(-0.1, 0.1)
        _train_one_step(module, SPECS, csr)
        _check(plan, module.memory())
        if optimizer != "sgd":
            assert plan["optimizer_bytes"] > 0


@pytest.mark.parametrize("combo", ["int8/lru/stochastic/bf16", "fp32/wtinylfu/stochastic/fp32", "int4/none/nearest/fp32"])
@pytest.mark.parametrize("slot_index", [False, True])
def test_with_keys_and_slot_index(combo, slot_index, csr):
    args = _combo_args(combo)
    row_keys = [1000, 0, 77, 5000, 123456]
    column_keys = [0, 4, 8, 0, 12]
    for keys in (dict(row_keys=row_keys), dict(column_keys=column_keys),
                 dict(row_keys=row_keys, column_keys=column_keys)):
        plan = mpe_torch.planned_memory(SPECS, optimizer="adam", slot_index=slot_index, **keys, **args)
        module = mpe_torch.TableBatchedEmbeddingBags(SPECS, optimizer="adam", learning_rate=0.01,
                                                     slot_index=slot_index, **keys, **args)
        _train_one_step(module, SPECS, csr)
        _check(plan, module.memory())
    # The keys' arrays are metadata: 8 bytes a table each, but a group whose column keys are
    # all 0 keeps none (the D = 16 group: table 3, column key 0).
    bare = mpe_torch.planned_memory(SPECS, optimizer="adam", slot_index=slot_index, **args)
    keyed = mpe_torch.planned_memory(SPECS, optimizer="adam", slot_index=slot_index, row_keys=row_keys,
                                     column_keys=column_keys, **args)
    assert keyed["metadata_bytes"] - bare["metadata_bytes"] == 8 * len(SPECS) + 8 * (len(SPECS) - 1)


def test_billion_rows_at_once():
    specs = [(10**9, 128), (10**9, 64), (1000, 16)]
    start = time.perf_counter()
    plan = mpe_torch.planned_memory(specs, storage="int8", cache="lru", cache_fraction=0.01, optimizer="adam",
                                    state_precision="bf16", slot_index=True)
    assert time.perf_counter() - start < 1.0
    # int8 rows: D + 8 bytes, + a 4-byte slot-index entry (row alignment 4).
    assert plan["store_bytes"] == 10**9 * (136 + 4) + 10**9 * (72 + 4) + 1000 * (24 + 4)
    # Adam's 2D values a row in bf16, + 2D FP32 values per cache slot (1 % of the rows, at
    # least 32 slots).
    slots = (10**7, 10**7, 32)
    assert plan["optimizer_bytes"] == sum(r * 2 * d * 2 + s * 2 * d * 4
                                          for (r, d), s in zip(specs, slots))
    assert plan["cache_bytes"] == sum(s * (4 * d + 17) for (_, d), s in zip(specs, slots))
    assert plan["workspace_bytes"] == 0
    assert plan["total_bytes"] == plan["embedding_bytes"] + plan["optimizer_bytes"]


def _error(fn):
    try:
        fn()
    except (TypeError, ValueError) as e:
        return type(e), str(e)
    return None


@pytest.mark.parametrize("kwargs", [
    dict(storage="int9"),
    dict(cache="arc"),
    dict(rounding="up"),
    dict(state_precision="fp64"),
    dict(optimizer="lion"),
    dict(storage="fp16", cache="lfu", cache_fraction=0.1),  # not built
    dict(storage="int4", state_precision="bf16"),  # not built
    dict(cache="none", cache_fraction=0.5),
    dict(cache="lru", cache_fraction=1.5),
    dict(specs=[]),
    dict(specs=[(0, 8)]),
    dict(specs=[(10, 2**21)]),
    dict(specs=[(10, 8.0)]),
    dict(specs=[(10, 8)], row_keys=[1, 2]),
    dict(specs=[(10, 8)], row_keys=[-1]),
    dict(specs=[(10, 8)], row_keys=[2**63 - 5]),
    dict(specs=[(10, 8)], column_keys=[2]),
    dict(specs=[(10, 8)], column_keys=["a"]),
    dict(slot_index=1),
    dict(cache_fraction="0.1"),
])
def test_refuses_as_the_constructor(kwargs):
    kwargs = dict(kwargs)
    specs = kwargs.pop("specs", [(10, 8), (5, 4)])
    planned = _error(lambda: mpe_torch.planned_memory(specs, **kwargs))
    built = _error(lambda: mpe_torch.TableBatchedEmbeddingBags(specs, **kwargs))
    assert planned is not None
    assert planned[0] is built[0]
    # mpe's own messages name the function (MixedDimEmbedding::planned_memory where the
    # constructor's name MixedDimEmbedding::MixedDimEmbedding); the rest is the same.
    def unnamed(message):
        return re.sub(r"mpe::(\w+)::\w+: ", r"mpe::\1::*: ", message)
    assert unnamed(planned[1]) == unnamed(built[1])
