# SPDX-License-Identifier: Apache-2.0
"""mpe_torch on CUDA devices (mpe_torch._C_cuda, mpe's CUDA backend).

The tests marked ``gpu`` need a CUDA device and the CUDA module (``built_with_cuda()``) and are
skipped elsewhere; they compare the CUDA module with the CPU module bit for bit (mpe's CUDA
backend gives the host backend's bits: docs/numerics.md), so every check is exact equality.
The others run everywhere: the build flags, argument checks and the refusals without a device.
"""
import importlib

import pytest
import torch

import mpe_torch
from conftest import make_csr

HAS_GPU = torch.cuda.is_available() and mpe_torch.built_with_cuda()
gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA device and mpe_torch's CUDA module (built_with_cuda())")
no_gpu = pytest.mark.skipif(HAS_GPU, reason="checks the refusals of a machine without CUDA")

SPECS = [(50, 8), (30, 4), (40, 8)]  # two D-groups (8: tables 0 and 2; 4: table 1)


# ---- everywhere ----

def test_built_with_cuda_says_whether_the_cuda_module_imports():
    try:
        importlib.import_module("mpe_torch._C_cuda")
        imported = True
    except ImportError:
        imported = False
    assert mpe_torch.built_with_cuda() is imported


def test_cuda_combinations_are_a_subset_of_the_cpu_ones():
    cpu, cuda = mpe_torch.built_combinations(), mpe_torch.built_combinations(device="cuda")
    assert mpe_torch.built_combinations(torch.device("cpu")) == cpu
    assert set(cuda) <= set(cpu)
    if mpe_torch.built_with_cuda():
        # The deliberate subset of variants.hpp's is_built_cuda (each "lru" with its "none").
        assert set(cuda) == {f"{s}/{c}/stochastic/fp32" for s in ("fp32", "fp16", "int8", "int4")
                             for c in ("none", "lru")}
        assert cuda == list(importlib.import_module("mpe_torch._C_cuda").built_combinations())
    else:
        assert cuda == []
    with pytest.raises(ValueError, match="device = 'meta': mpe_torch runs on 'cpu' or 'cuda' devices only"):
        mpe_torch.built_combinations(device="meta")


def test_store_placement_is_checked():
    for bad in ("hbm", "Device", 1, None):
        with pytest.raises(ValueError, match=f"store_placement = {bad!r} is not one of 'device', 'host_mapped', "
                                             "'managed'"):
            mpe_torch.TableBatchedEmbeddingBags(SPECS, store_placement=bad)
    for placement in ("host_mapped", "managed"):
        with pytest.raises(ValueError, match=f"store_placement = '{placement}' applies to CUDA modules only"):
            mpe_torch.TableBatchedEmbeddingBags(SPECS, store_placement=placement)
        with pytest.raises(ValueError, match="store_placement .* applies to CUDA modules only"):
            mpe_torch.TableBatchedEmbeddingBags(SPECS, device="cpu", store_placement=placement)
    m = mpe_torch.TableBatchedEmbeddingBags(SPECS, store_placement="device")
    assert m.store_placement == "device" and m.device == torch.device("cpu")


def test_device_argument_is_checked():
    for bad, what in (("meta", "'meta': mpe_torch runs on 'cpu' or 'cuda' devices only"),
                      (torch.device("meta"), "device\\(type='meta'\\): mpe_torch runs on"),
                      ("gpu0", "'gpu0' is not a device"), (3.5, "3.5 is not a device")):
        with pytest.raises(ValueError, match=f"device = {what}"):
            mpe_torch.TableBatchedEmbeddingBags(SPECS, device=bad)
    assert mpe_torch.TableBatchedEmbeddingBags(SPECS, device=torch.device("cpu")).device == torch.device("cpu")


@no_gpu
def test_cuda_is_refused_naming_the_reason_without_a_device():
    why = ("torch.cuda.is_available\\(\\) is False" if mpe_torch.built_with_cuda()
           else "built without its CUDA module, mpe_torch._C_cuda")
    for device in ("cuda", "cuda:0", torch.device("cuda", 0)):
        asked = torch.device(device)
        with pytest.raises(RuntimeError, match=f"device = '{asked}' cannot be used: .*{why}.*CPU only"):
            mpe_torch.TableBatchedEmbeddingBags(SPECS, device=device)
        with pytest.raises(RuntimeError, match=f"device = .* cannot be used: .*{why}"):
            mpe_torch.TableBatchedEmbeddingBags(SPECS, device=device, store_placement="host_mapped")
    m = mpe_torch.TableBatchedEmbeddingBags(SPECS, seed=3)
    before = m.state_dict()["mpe_state"].clone()
    for move, asked in ((lambda m: m.cuda(), "cuda"), (lambda m: m.to("cuda"), "cuda"),
                        (lambda m: m.to(torch.device("cuda:0")), "cuda:0")):
        with pytest.raises(RuntimeError, match=f"TableBatchedEmbeddingBags cannot be moved to {asked}: .*{why}"):
            move(m)
    # A parent's move reaches the module through _apply: refused naming the reason, not with
    # torch's own "no driver" words; cuda(1) names the index.
    parent = torch.nn.Sequential(m, torch.nn.Identity())
    for move in (lambda p: p._apply(lambda t: t.to("cuda")), lambda p: p.cuda()):
        with pytest.raises(RuntimeError, match=f"TableBatchedEmbeddingBags cannot be moved to cuda: .*{why}"):
            move(parent)
    with pytest.raises(RuntimeError, match=f"TableBatchedEmbeddingBags cannot be moved to cuda:1: .*{why}"):
        m.cuda(1)
    assert m.device == torch.device("cpu") and torch.equal(m.state_dict()["mpe_state"], before)


@pytest.mark.skipif(not mpe_torch.built_with_cuda() or torch.cuda.is_available(),
                    reason="the CUDA module's own check, on a machine without a CUDA device")
def test_the_cuda_core_refuses_a_missing_device():
    # The C++ core (binding.cpp compiled with MPE_TORCH_CUDA) checks the ordinal itself.
    cuda = importlib.import_module("mpe_torch._C_cuda")
    with pytest.raises(ValueError, match=r"device = cuda:0 is not one of the 0 CUDA device\(s\)"):
        cuda.Tbe([(10, 4)], "fp32", "none", 0.0, "stochastic", "fp32", "sum", "sgd", 0.01, 1e-8, 0.9, 0.999, 0,
                 "raise", False, False, [], [], 0.0, 0, "device")
    with pytest.raises(ValueError, match="store_placement = 'hbm' is not one of"):
        cuda.Tbe([(10, 4)], "fp32", "none", 0.0, "stochastic", "fp32", "sum", "sgd", 0.01, 1e-8, 0.9, 0.999, 0,
                 "raise", False, False, [], [], 0.0, 0, "hbm")


# ---- on a CUDA device ----

def _options(combination):
    storage, cache, rounding, state_precision = combination.split("/")
    return dict(storage=storage, cache=cache, cache_fraction=0.0 if cache == "none" else 0.5, rounding=rounding,
                state_precision=state_precision)


def _pair(combination, optimizer="rowwise_adagrad", specs=SPECS, **kw):
    """The same module on the CPU and on cuda:0."""
    args = dict(_options(combination), optimizer=optimizer, learning_rate=0.05, seed=11, **kw)
    return (mpe_torch.TableBatchedEmbeddingBags(specs, **args),
            mpe_torch.TableBatchedEmbeddingBags(specs, device="cuda:0", **args))


def _train(m, steps, specs=SPECS, seed=0, weighted=False):
    """`steps` training steps of loss = sum(out * g) with fixed g; returns the outputs (on the CPU)."""
    outs = []
    for s in range(steps):
        idx, off = make_csr([r for r, _ in specs], 6, 5, seed + s)
        psw = torch.rand(idx.numel(), generator=torch.Generator().manual_seed(seed + s)) if weighted else None
        g = torch.randn(6, sum(d for _, d in specs), generator=torch.Generator().manual_seed(1000 + seed + s))
        dev = m.device
        out = m(idx.to(dev), off.to(dev), None if psw is None else psw.to(dev))
        assert out.device == dev and out.dtype == torch.float32 and out.requires_grad
        (out * g.to(dev)).sum().backward()
        outs.append(out.detach().cpu())
    return outs


def _weights(m):
    return [w.cpu() for w in m.split_embedding_weights()]


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@gpu
@pytest.mark.parametrize("combination", mpe_torch.built_combinations(device="cuda") if HAS_GPU else [])
def test_cuda_trains_the_cpu_bits(combination):
    cpu, cuda = _pair(combination)
    assert cuda.device == torch.device("cuda", 0)
    _assert_same(_weights(cuda), _weights(cpu))  # the initial draw
    _assert_same(_train(cuda, 20), _train(cpu, 20))  # every step's forward
    _assert_same(_weights(cuda), _weights(cpu))
    assert torch.equal(cuda.state_dict()["mpe_state"], cpu.state_dict()["mpe_state"])
    assert cuda.step == cpu.step == 20 and cuda.stats() == cpu.stats()
    cuda.eval(), cpu.eval()
    idx, off = make_csr([r for r, _ in SPECS], 4, 3, 99)
    assert torch.equal(cuda(idx.cuda(), off.cuda()).cpu(), cpu(idx, off))


@gpu
@pytest.mark.parametrize("optimizer", mpe_torch.OPTIMIZERS)
def test_cuda_optimizers_and_weights(optimizer):
    combination = "int8/lru/stochastic/fp32"
    cpu, cuda = _pair(combination, optimizer=optimizer, pooling_mode="sum")
    _assert_same(_train(cuda, 5, weighted=True), _train(cpu, 5, weighted=True))
    _assert_same(_weights(cuda), _weights(cpu))
    single = [(64, 16)]  # one D-group: the group's own path
    cpu, cuda = _pair(combination, optimizer=optimizer, specs=single)
    _assert_same(_train(cuda, 5, specs=single), _train(cpu, 5, specs=single))
    _assert_same(_weights(cuda), _weights(cpu))


@gpu
@pytest.mark.parametrize("combination", ["int4/none/stochastic/fp32", "int8/lru/stochastic/fp32"])
def test_range_growth_and_row_copies_give_the_cpu_bits(combination):
    # max_range_growth clamps store updates in a kernel shared by both backends; copy_rows
    # (TieredRows' promotions) goes through each backend's row reads and writes.
    cpu, cuda = _pair(combination, optimizer="sgd", max_range_growth=0.01)
    for m in (cpu, cuda):
        m.set_learning_rate(2.0)  # a rate at which the bound clamps
    _assert_same(_train(cuda, 10), _train(cpu, 10))
    _assert_same(_weights(cuda), _weights(cpu))
    tiers = {d: mpe_torch.TieredRows(ids=500, private_rows=10, shared_rows=SPECS[0][0] - 10, promote_at=2)
             for d in ("cpu", "cuda")}
    for step in range(6):
        idx = torch.randint(0, 40, (30,), generator=torch.Generator().manual_seed(step))
        rows = {d: tiers[d](idx.to(d)) for d in tiers}
        assert rows["cuda"].device.type == "cuda" and torch.equal(rows["cuda"].cpu(), rows["cpu"])
        tiers["cpu"].copy_moved_rows(cpu, 0)
        tiers["cuda"].copy_moved_rows(cuda, 0)
    assert tiers["cpu"].stats()["promotions"] > 0
    _assert_same(_weights(cuda), _weights(cpu))


@gpu
@pytest.mark.parametrize("placement", ["host_mapped", "managed"])
def test_store_placements_train_the_same_bits(placement):
    cpu, _ = _pair("int4/lru/stochastic/fp32")
    cuda = mpe_torch.TableBatchedEmbeddingBags(SPECS, device="cuda", store_placement=placement,
                                               optimizer="rowwise_adagrad", learning_rate=0.05, seed=11,
                                               **_options("int4/lru/stochastic/fp32"))
    assert cuda.store_placement == placement and f"store_placement='{placement}'" in repr(cuda)
    _assert_same(_train(cuda, 8), _train(cpu, 8))
    _assert_same(_weights(cuda), _weights(cpu))


@gpu
def test_state_dict_moves_between_devices_both_ways():
    combination = "fp16/lru/stochastic/fp32"
    cpu, cuda = _pair(combination)
    _train(cuda, 7)
    saved = cuda.state_dict()
    assert saved["mpe_state"].device.type == "cpu"
    cpu.load_state_dict(saved)  # GPU -> CPU
    assert torch.equal(cpu.state_dict()["mpe_state"], saved["mpe_state"])
    _assert_same(_train(cpu, 5, seed=50), _train(cuda, 5, seed=50))
    _assert_same(_weights(cpu), _weights(cuda))
    other = _pair(combination)[1]
    other.load_state_dict(cpu.state_dict())  # CPU -> GPU
    assert torch.equal(other.state_dict()["mpe_state"], cpu.state_dict()["mpe_state"])
    # A state tensor held on the device (torch.load(map_location="cuda")) loads as well.
    on_device = {k: (v.cuda() if torch.is_tensor(v) else v) for k, v in cpu.state_dict().items()}
    other.load_state_dict(on_device)
    _assert_same(_train(other, 3, seed=80), _train(cpu, 3, seed=80))


@gpu
def test_moves_carry_the_exact_state():
    cpu, _ = _pair("int8/lru/stochastic/fp32")
    ref, _ = _pair("int8/lru/stochastic/fp32")
    _train(cpu, 4), _train(ref, 4)
    before = cpu.state_dict()["mpe_state"]
    assert cpu.cuda() is cpu and cpu.device == torch.device("cuda", torch.cuda.current_device())
    assert torch.equal(cpu.state_dict()["mpe_state"], before)
    _assert_same(_train(cpu, 3, seed=20), _train(ref, 3, seed=20))
    assert cpu.to("cpu") is cpu and cpu.device == torch.device("cpu")
    assert cpu.to(torch.device("cuda:0")).cpu() is cpu
    parent = torch.nn.Sequential(cpu).to("cuda")  # a parent's move reaches it through _apply
    assert cpu.device.type == "cuda" and parent[0] is cpu
    _assert_same(_train(cpu, 3, seed=30), _train(ref, 3, seed=30))
    assert torch.equal(cpu.state_dict()["mpe_state"], ref.state_dict()["mpe_state"])
    # A pending forward does not move: its backward says so.
    idx, off = make_csr([r for r, _ in SPECS], 2, 2, 5)
    out = cpu(idx.cuda(), off.cuda())
    cpu.cpu()
    with pytest.raises(RuntimeError, match="the module moved to cpu after this forward"):
        out.sum().backward()
    with pytest.raises(RuntimeError, match="cannot be converted to torch.float16"):
        cpu.cuda().to(torch.float16)


@gpu
def test_wrong_device_tensors_are_refused_naming_both_devices():
    cpu, cuda = _pair("fp32/none/stochastic/fp32")
    idx, off = make_csr([r for r, _ in SPECS], 3, 2, 1)
    before = cuda.state_dict()["mpe_state"]
    for args, name in (((idx, off.cuda()), "indices"), ((idx.cuda(), off), "offsets"),
                       ((idx.cuda(), off.cuda(), torch.ones(idx.numel())), "per_sample_weights")):
        with pytest.raises(ValueError, match=f"{name} must be on cuda:0 \\(this module's device.*got device cpu"):
            cuda(*args)
    with pytest.raises(ValueError, match="indices must be on the CPU \\(this module's device.*got device cuda:0"):
        cpu(idx.cuda(), off)
    out = cuda(idx.cuda(), off.cuda())
    with pytest.raises(ValueError, match="grad_output must be on cuda:0 .*got device cpu"):
        cuda._tbe.backward(torch.zeros(out.shape), cuda._tbe.forward_id)
    with pytest.raises(ValueError, match="weights must be on cuda:0 .*got device cpu"):
        cuda.set_weights(0, torch.zeros(50, 8))
    out.sum().backward()
    cuda.set_weights(0, torch.full((50, 8), 0.25, device="cuda"))
    assert torch.equal(cuda.get_weights(0), torch.full((50, 8), 0.25, device="cuda"))
    assert not torch.equal(cuda.state_dict()["mpe_state"], before)


@gpu
def test_calls_on_another_stream_are_ordered():
    cpu, cuda = _pair("int8/lru/stochastic/fp32")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # inputs made and outputs read on a stream other than the module's
        outs = _train(cuda, 6)
    _assert_same(outs, _train(cpu, 6))
    _assert_same(_weights(cuda), _weights(cpu))


@gpu
def test_exports_and_imports_of_a_cuda_module():
    cpu, cuda = _pair("int8/lru/stochastic/fp32")
    _train(cpu, 3), _train(cuda, 3)
    for layout in ("fbgemm_fused", "tbe_inference"):
        a, b = cuda.export_table(1, layout=layout), cpu.export_table(1, layout=layout)
        assert a.device.type == "cpu" and torch.equal(a, b)
    assert cuda.stats() == cpu.stats()  # both flushed
    data = _pair("int8/lru/stochastic/fp32")[0].export_table(2)  # another module's rows (an export flushes)
    assert cuda.import_table(2, data) == cpu.import_table(2, data)
    assert torch.equal(cuda.state_dict()["mpe_state"], cpu.state_dict()["mpe_state"])
