# SPDX-License-Identifier: Apache-2.0
"""mpe_torch: PyTorch table-batched embedding bags over mpe's mixed-precision cached embeddings.

``TableBatchedEmbeddingBags`` keeps its tables in mpe's low-precision store (fp32, fp16, bf16,
int8, int4 or int2 row-wise, FP8 E4M3/E5M2 row-wise) with an optional FP32 cache of hot rows (LRU,
second-touch LRU, LFU, direct-mapped or W-TinyLFU), takes FBGEMM TBE's input
(table-major int64 CSR) and returns the pooled vectors as a ``(B, sum D_t)`` float32 tensor.
The optimizer is fused into backward, as in FBGEMM's ``SplitTableBatchedEmbeddingBagsCodegen``:
the tables are not ``nn.Parameter``\\ s and get no ``.grad``; ``loss.backward()`` updates them.

A module runs on the CPU (mpe's host backend, OpenMP) or, where the extension was built with
its CUDA module (``built_with_cuda()``), on a CUDA device (``device="cuda"``: mpe's CUDA
backend). ``.to(device)``, ``.cuda()`` and ``.cpu()`` move its exact state between the two;
``.half()``, ``.double()`` and other conversions raise RuntimeError naming the reason rather than
return the module unchanged (``.float()`` returns it as it is: its outputs are float32).
Tensors of the wrong dtype raise
``TypeError``; of the wrong device, shape, number of dimensions or contiguity ``ValueError``;
they are never converted. mpe's own errors arrive as ``ValueError`` (``std::invalid_argument``:
bad input, bad hyperparameters, names not built), ``RuntimeError`` (``std::logic_error``:
misuse, such as a second backward of one forward) and ``mpe_torch.CheckpointError`` (a
``RuntimeError``: a state that fails mpe's checkpoint verification).
"""
import importlib.util
import math
import numbers
import re

import torch
from torch import nn

from . import _C
from ._args import _integer, _real
from ._layout import BagPlanCache
from ._tiered import TieredRows

try:  # the CUDA module: built where torch has CUDA and nvcc was found (python/setup.py)
    from . import _C_cuda
    _C_CUDA_ERROR = None
except ImportError as e:  # not built (MPE_TORCH_CUDA=0, no nvcc, a CPU-only torch) or not loadable
    _C_cuda = None
    _C_CUDA_ERROR = e

__all__ = ["TableBatchedEmbeddingBags", "TieredRows", "CheckpointError", "built_combinations", "built_with_cuda", "planned_memory",
           "STORAGES", "CACHES", "ROUNDINGS", "STATE_PRECISIONS", "OPTIMIZERS", "EXPORT_FORMATS", "WEIGHTS_INITS",
           "STORE_PLACEMENTS"]

CheckpointError = _C.CheckpointError


def _table_index(table):
    return _integer(table, "table", "an integer table number")

# The names each choice accepts: the C++ variant lists of the extension (csrc/variants.hpp), each
# variant named by mpe's own name (less "_rowwise"). Which combinations are compiled:
# built_combinations().
STORAGES = tuple(_C.storages())
CACHES = tuple(_C.caches())  # "none", then mpe's cache policies
ROUNDINGS = tuple(_C.roundings())
STATE_PRECISIONS = tuple(_C.state_precisions())
OPTIMIZERS = tuple(_C.optimizers())  # mpe::KnownOptimizers
_GRID_STORAGES = ("int8", "int4", "int2")  # an affine per-row grid: max_range_growth applies
EXPORT_FORMATS = tuple(_C.export_formats())  # row formats with an FBGEMM layout (export_table's format=)
_STATE_FORMAT = 2  # 1: one MPECKPT1 tensor per group; 2: one MPEMIXD1 tensor
WEIGHTS_INITS = ("uniform", "zeros")  # weights_init's names (it also takes (low, high) pairs)


# Where a CUDA module's store lives (mpe::CudaBackend::Placement): "device" (device memory, from
# torch's caching allocator), "host_mapped" (pinned host memory mapped into the device),
# "managed" (CUDA managed memory, preferred location host). The cache is device memory always.
STORE_PLACEMENTS = ("device", "host_mapped", "managed")


def built_with_cuda():
    """Whether this build has the CUDA module (``mpe_torch._C_cuda``): modules with
    ``device="cuda"`` need it (and a CUDA device). False where it was not built (python/setup.py:
    torch without CUDA, no nvcc, ``MPE_TORCH_CUDA=0``) or cannot be loaded."""
    return _C_cuda is not None


def built_combinations(device="cpu"):
    """The storage/cache/rounding/state_precision combinations compiled into this build, as
    strings ``"int8/lru/stochastic/fp32"``. Cache ``none`` is ``Lru<32>`` with no cache rows.

    ``device``: ``"cpu"`` (default; the CPU module's) or ``"cuda"`` (the CUDA module's, a subset
    of the CPU ones; empty when ``built_with_cuda()`` is False). Also a ``torch.device``.
    Raises ValueError naming ``device`` for another device type. Needs no GPU."""
    kind = _device_type(device, "device")
    if kind == "cuda":
        return list(_C_cuda.built_combinations()) if _C_cuda is not None else []
    return list(_C.built_combinations())


def _device_type(device, name):
    """``device``'s type, "cpu" or "cuda" (ValueError naming ``name`` for any other)."""
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"mpe_torch: {name} = {device!r} is not a device (give 'cpu', 'cuda', 'cuda:N' or a "
                         "torch.device)") from None
    if d.type not in ("cpu", "cuda"):
        raise ValueError(f"mpe_torch: {name} = {device!r}: mpe_torch runs on 'cpu' or 'cuda' devices only")
    return d.type


def _cuda_unavailable():
    """Why a module cannot run on a CUDA device here, or None when it can."""
    if _C_cuda is None:
        if importlib.util.find_spec(f"{__name__}._C_cuda") is not None:
            return f"this mpe_torch's CUDA module, mpe_torch._C_cuda, cannot be loaded ({_C_CUDA_ERROR})"
        return ("this mpe_torch was built without its CUDA module, mpe_torch._C_cuda (python/README.md: it is "
                "built when torch has CUDA and nvcc is found, unless MPE_TORCH_CUDA=0)")
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False (no usable CUDA device or driver)"
    return None


def _resolve_device(device, name="device"):
    """The torch.device a module runs on (``cuda`` without an index: the current CUDA device).
    ValueError for a device type other than cpu/cuda, RuntimeError where CUDA cannot run."""
    kind = _device_type(device, name)
    d = torch.device(device)
    if kind == "cpu":
        return torch.device("cpu")
    why = _cuda_unavailable()
    if why is not None:
        raise RuntimeError(f"mpe_torch: {name} = {str(d)!r} cannot be used: {why}; mpe_torch runs on the CPU only "
                           "here")
    index = torch.cuda.current_device() if d.index is None else d.index
    if not 0 <= index < torch.cuda.device_count():
        raise ValueError(f"mpe_torch: {name} = {str(d)!r}: this machine has {torch.cuda.device_count()} CUDA "
                         "device(s)")
    return torch.device("cuda", index)


# There is no build option for it: the compiled set is variants.hpp's is_built() (each
# instantiation costs ~13 s of CPU to compile), and a (storage, cache) pair it newly allows needs
# its line in a csrc/group_<storage>*.cpp (python/README.md, "Compiled combinations").
_BUILD_HINT = (
    "to build it, allow it in is_built() in python/mpe_torch/csrc/variants.hpp and rebuild (python/README.md, "
    "compiled combinations)")
_CUDA_BUILD_HINT = (
    "to build it for CUDA, allow it in is_built_cuda() in python/mpe_torch/csrc/variants.hpp and rebuild "
    "(python/README.md, compiled combinations)")


def _short_not_built(error, asked, device="cpu"):
    """The extension refuses a combination that is not compiled with a message listing all
    built ones (~1,400 characters). This returns a ValueError saying what was asked, the
    nearest built combinations (fewest fields changed; the storage, then the cache, kept
    first) and how to build it; None when ``error`` is another error (names, specs, ...: the
    extension's checks and their order are kept)."""
    if " is not built; built: " not in str(error):
        return None
    asked = tuple(asked)
    built = [tuple(c.split("/")) for c in built_combinations(device)]

    def distance(c):
        differs = [a != b for a, b in zip(asked, c)]
        return (sum(differs), *differs)

    nearest = sorted(built, key=distance)[:3]  # stable: ties in built_combinations() order
    if device == "cuda":
        return ValueError(f"mpe_torch: storage/cache/rounding/state_precision = {'/'.join(asked)} is not built for "
                          f"CUDA; nearest built: {', '.join('/'.join(c) for c in nearest)} (all: "
                          f"built_combinations(device='cuda')); {_CUDA_BUILD_HINT}")
    return ValueError(f"mpe_torch: storage/cache/rounding/state_precision = {'/'.join(asked)} is not built; "
                      f"nearest built: {', '.join('/'.join(c) for c in nearest)} (all: built_combinations()); "
                      f"{_BUILD_HINT}")


def _name(x, what):
    """Accepts a string or an enum (e.g. fbgemm_gpu's PoolingMode.SUM) by its name."""
    if isinstance(x, str):
        return x.lower()
    name = getattr(x, "name", None)
    if isinstance(name, str):
        return name.lower()
    raise TypeError(f"mpe_torch: {what} must be a string, got {type(x).__name__}")


def _specs(specs):
    """The (rows, D) pairs of ``specs`` as ints (TypeError for anything else)."""
    pairs = []
    try:
        spec_list = list(specs)
    except TypeError:
        raise TypeError("mpe_torch: specs must be a list of (rows, D) pairs") from None
    for t, s in enumerate(spec_list):
        try:
            rows, dim = s
        except (TypeError, ValueError):
            raise TypeError(f"mpe_torch: specs[{t}] = {s!r} is not a (rows, D) pair") from None
        if isinstance(rows, bool) or isinstance(dim, bool) or not all(
                isinstance(v, int) or (torch.is_tensor(v) and v.dim() == 0 and not v.is_floating_point())
                for v in (rows, dim)):
            raise TypeError(f"mpe_torch: specs[{t}] = {s!r}: rows and D must be integers")
        pairs.append((int(rows), int(dim)))
    return pairs


def _keys(name, value, T):
    """row_keys / column_keys: None, or T integers in [0, 2**63) (TypeError / ValueError naming them)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or (torch.is_tensor(value) and value.dim() != 1):
        raise TypeError(f"mpe_torch: {name} = {value!r} must be a sequence of {T} integers")
    try:
        seq = list(value)
    except TypeError:
        raise TypeError(f"mpe_torch: {name} = {value!r} must be a sequence of {T} integers") from None
    if len(seq) != T:
        raise ValueError(f"mpe_torch: {name} = {value!r} has {len(seq)} entries; it needs one per table, T = {T}")
    seq = [_integer(k, f"{name}[{t}]", "an integer") for t, k in enumerate(seq)]
    for t, k in enumerate(seq):
        if not 0 <= k < 2**63:
            raise ValueError(f"mpe_torch: {name}[{t}] = {k} is outside [0, 2**63)")
    return seq


def _shown(value, limit=160):
    """repr(value), cut to ``limit`` characters (a list of many tables' ranges stays readable)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _weights_init(value, T):
    """The constructor's ``weights_init``: ``"uniform"``, ``"zeros"``, one ``(low, high)`` pair
    (floats) or a list of T pairs. A ValueError naming ``weights_init`` and its value for anything
    else; the ranges themselves are mpe's to check, when the tables are drawn."""
    def bad(why):
        return ValueError(f"mpe_torch: weights_init = {_shown(value)} {why}; it takes 'uniform' (the default), 'zeros', "
                          f"a (low, high) pair or a list of T = {T} such pairs, one per table")

    def number(x):
        if isinstance(x, (bool, str, bytes)):
            return False
        if torch.is_tensor(x):
            return x.dim() == 0 and x.dtype != torch.bool and not x.is_complex()
        return isinstance(x, numbers.Real)

    def pair(x):
        if isinstance(x, (str, bytes)) or (torch.is_tensor(x) and x.dim() == 0):
            return None
        try:
            items = list(x)
        except TypeError:
            return None
        if len(items) == 2 and all(number(v) for v in items):
            return float(items[0]), float(items[1])
        return None

    if isinstance(value, str):
        if value.lower() in WEIGHTS_INITS:
            return value.lower()
        raise bad(f"is not one of {', '.join(map(repr, WEIGHTS_INITS))}")
    one = pair(value)
    if one is not None:
        return one
    try:
        items = [] if isinstance(value, bytes) or (torch.is_tensor(value) and value.dim() == 0) else list(value)
    except TypeError:
        items = []
    pairs = [pair(v) for v in items]
    if not pairs or any(p is None for p in pairs):
        raise bad("is neither a name nor (low, high) pairs of numbers")
    if len(pairs) != T:
        raise bad(f"has {len(pairs)} (low, high) pair(s)")
    return pairs


def planned_memory(specs, storage="fp32", cache="none", cache_fraction=0.0, rounding="stochastic",
                   optimizer="sgd", state_precision="fp32", slot_index=False, row_keys=None, column_keys=None):
    """Bytes that ``TableBatchedEmbeddingBags(specs, ...)`` with these arguments will hold, computed
    without building it (nothing proportional to the rows is allocated: a 10**9-row table is
    planned at once), e.g. for TorchRec's planner to size a shard before anything is allocated.

    Returns the dict ``TableBatchedEmbeddingBags.memory()`` returns once the module has taken
    one training step (the optimizer state exists from the first step): store_bytes,
    cache_bytes, optimizer_bytes, metadata_bytes, workspace_bytes (0: per-call buffers, sized by
    the batches, are not planned), embedding_bytes (store + cache + metadata) and total_bytes;
    every value in bytes and equal to that module's, field by field (workspace aside). mpe's
    ``MixedDimEmbedding::planned_memory``: the sum over the D-groups of each group's store
    (rows x padded row bytes, slot-index entries included), FP32 cache (slots x (4D + 17) plus
    the policy's metadata), optimizer state (rows x S x the state precision's bytes, plus
    slots x S x 4 for a ``"bf16"`` / ``"fp16"`` state with a cache; S = 0 for sgd, 1 for
    rowwise_adagrad, D for adagrad, 2D for adam) and metadata.

    The arguments are the constructor's (the others, such as ``learning_rate``, ``seed`` or
    ``pooling_mode``, do not change the footprint) and are checked as it checks them: the same
    TypeError and ValueError for bad specs, names and keys, and for a
    storage/cache/rounding/state_precision combination that is not built.
    """
    pairs = _specs(specs)
    storage, cache, rounding = _name(storage, "storage"), _name(cache, "cache"), _name(rounding, "rounding")
    state_precision, optimizer = _name(state_precision, "state_precision"), _name(optimizer, "optimizer")
    if not isinstance(slot_index, bool):
        raise TypeError(f"mpe_torch: slot_index = {slot_index!r} must be a bool")
    row_keys, column_keys = _keys("row_keys", row_keys, len(pairs)), _keys("column_keys", column_keys, len(pairs))
    cache_fraction = _real(cache_fraction, "cache_fraction")
    try:
        return dict(_C.planned_memory(pairs, storage, cache, cache_fraction, rounding, optimizer, state_precision,
                                      slot_index, row_keys or [], column_keys or []))
    except ValueError as e:
        short = _short_not_built(e, (storage, cache, rounding, state_precision))
        if short is None:
            raise
        raise short from None


def _refuse_device(module, device, why=None):
    raise RuntimeError(f"mpe_torch: {type(module).__name__} cannot be moved to {device}: "
                       f"{module._where_it_runs if why is None else why + '; it runs on the CPU only here'}")


def _refuse_conversion(module, fn, instead="build the module with the options you want instead", probe=None):
    """nn.Module._apply's check for modules holding mpe tables (mpe's, CPU, their own formats;
    not torch tensors): .to() / .half() / .double() and friends cannot move or convert them. A
    conversion that leaves a CPU float32 tensor as it is (.cpu(), .float(), .to("cpu")) passes
    (the module is unchanged and returned); any other raises RuntimeError naming the module and
    what was asked, instead of returning the module unchanged."""
    probe = torch.zeros(1) if probe is None else probe
    try:
        out = fn(probe)
    except Exception as e:  # e.g. .to("cuda") on a machine without a GPU: torch's own error
        what = f"a conversion that fails on a CPU tensor ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    else:
        if torch.is_tensor(out) and out.device == probe.device and out.dtype == probe.dtype:
            return
        what = f"{out.device}/{out.dtype}" if torch.is_tensor(out) else type(out).__name__
    raise RuntimeError(f"mpe_torch: {type(module).__name__} cannot be moved or converted (asked for {what}); its "
                       f"tables live in mpe's store in their own formats (the storage option); {instead}")


class _CpuOnly:
    """Mixin for modules holding mpe tables: conversions go through _refuse_conversion (with
    the class's _conversion_advice), and device moves that never reach _apply's probe raise
    naming the reason (torch's own "no driver" error on a machine without the device would
    hide it). Put it before nn.Module in the bases."""

    _conversion_advice = "build the module with the options you want instead"
    _where_it_runs = "its tables live in mpe's CPU store (mpe's host backend, OpenMP); it runs on the CPU only"

    def _apply(self, fn, recurse=True):
        _refuse_conversion(self, fn, self._conversion_advice)
        return super()._apply(fn, recurse)

    def __deepcopy__(self, memo):
        # The tables are mpe's C++ objects, not tensors (pickle refuses them too).
        raise TypeError(f"mpe_torch: a {type(self).__name__} cannot be deep-copied (its tables are mpe's C++ "
                        "objects); save state_dict() and load it into a module built with the same options")

    def to(self, *args, **kwargs):
        # Names the device or dtype asked for before torch would try (and fail) on a probe.
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None and torch.device(device).type != "cpu":
            _refuse_device(self, str(device))
        if dtype is not None and dtype != torch.float32:
            raise RuntimeError(f"mpe_torch: {type(self).__name__} cannot be converted to {dtype}: its tables live in "
                               f"mpe's CPU store in their own formats (the storage option); {self._conversion_advice}")
        return super().to(*args, **kwargs)

    def cuda(self, device=None):
        _refuse_device(self, "cuda")

    def xpu(self, device=None):
        _refuse_device(self, "xpu")

    def ipu(self, device=None):
        _refuse_device(self, "ipu")

    def mtia(self, device=None):
        _refuse_device(self, "mtia")


class _Movable(_CpuOnly):
    """Mixin for modules whose mpe tables move between the CPU and CUDA devices (the class
    keeps ``_device`` and implements ``_move(device)``): ``.to(device)``, ``.cuda()``, ``.cpu()``
    and a parent's moves (``_apply``) move the exact state; a CUDA move where CUDA cannot run
    raises RuntimeError naming the reason; dtype conversions and other devices are refused as
    by _CpuOnly."""

    _where_it_runs = ("mpe_torch runs its tables on the CPU only, or on CUDA devices with its CUDA module "
                      "(mpe_torch.built_with_cuda())")

    def _apply(self, fn, recurse=True):
        probe = torch.zeros(1, device=self._device)
        try:
            out = fn(probe)
        except Exception as e:  # e.g. a parent's .cuda() without a device: say why, not torch's words
            why = _cuda_unavailable()
            if why is not None and re.search(r"cuda|nvidia", str(e), re.IGNORECASE):
                _refuse_device(self, "cuda", why)
            out = None
        if not (torch.is_tensor(out) and out.dtype == probe.dtype and out.device.type in ("cpu", "cuda")):
            _refuse_conversion(self, fn, self._conversion_advice, probe)
        if out.device != self._device:
            self._move(out.device)
        return nn.Module._apply(self, fn, recurse)

    def to(self, *args, **kwargs):
        # Names the device or dtype asked for before torch would try (and fail) on a probe.
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None:
            kind = torch.device(device).type
            if kind not in ("cpu", "cuda"):
                _refuse_device(self, str(device))
            if kind == "cuda" and _cuda_unavailable() is not None:
                _refuse_device(self, str(device), _cuda_unavailable())
        if dtype is not None and dtype != torch.float32:
            raise RuntimeError(f"mpe_torch: {type(self).__name__} cannot be converted to {dtype}: its tables live "
                               f"in mpe's store in their own formats (the storage option); {self._conversion_advice}")
        return nn.Module.to(self, *args, **kwargs)

    def cuda(self, device=None):
        why = _cuda_unavailable()
        if why is not None:
            asked = "cuda" if device is None else str(torch.device("cuda", device) if isinstance(device, int) else device)
            _refuse_device(self, asked, why)
        return nn.Module.cuda(self, device)


class _TbeFunction(torch.autograd.Function):
    """Training forward; backward runs the fused optimizer step and returns no gradient."""

    @staticmethod
    def forward(ctx, anchor, module, indices, offsets, per_sample_weights):
        tbe = module._tbe
        out = tbe.forward(indices, offsets, per_sample_weights, True)
        ctx.module, ctx.tbe = module, tbe
        ctx.forward_id = tbe.forward_id
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        if ctx.module._tbe is not ctx.tbe:
            raise RuntimeError("mpe_torch.TableBatchedEmbeddingBags.backward: the module moved to "
                               f"{ctx.module.device} after this forward (a move carries the state, not a pending "
                               "forward); run backward before moving the module")
        # Autograd may hand over an expanded or otherwise strided gradient (e.g. from
        # out.sum()); the fused step needs it dense and row-major.
        ctx.tbe.backward(grad_output.contiguous(), ctx.forward_id)
        return None, None, None, None, None


class TableBatchedEmbeddingBags(_Movable, nn.Module):
    r"""Table-batched embedding bags in mixed precision, with a fused optimizer (CPU or CUDA).

    Args:
        specs: list of ``(rows, D)`` pairs, one per table (T tables), like FBGEMM TBE's
            ``embedding_specs``. Tables may have different D: the module holds one mpe
            ``MixedDimEmbedding``, which keeps one ``CachedEmbedding`` per distinct D ("group":
            groups in order of first appearance, tables inside a group in spec order) and
            scatters each group's pooled vectors into the table's columns of the output (a copy
            of the output, of the gradient and of the indices per step when there is more than
            one group; one set of workspaces and one cache per group). All groups take a
            training step together or none does.
        storage: ``"fp32"``, ``"fp16"``, ``"bf16"``, ``"int8"`` (FBGEMM fused 8-bit row-wise),
            ``"int4"`` (fused 4-bit row-wise), ``"int2"`` (fused 2-bit row-wise), ``"fp8_e4m3"`` or ``"fp8_e5m2"`` (OCP FP8 codes with
            an f32 scale per row); ``STORAGES``.
        cache: ``"none"``, ``"lru"`` (``Lru<32>``: 32-way set-associative FP32 cache),
            ``"lfu"`` (``Lfu<32>``), ``"direct_mapped"``, ``"second_touch_lru"``
            (``SecondTouchLru<32>``) or ``"wtinylfu"`` (``WTinyLfu<32>``);
            ``CACHES``.
        cache_fraction: cache rows as a fraction of each group's rows (rounded; at least the
            policy's ways when > 0). 0 with a cache policy means no cache; > 0 needs one.
        rounding: ``"stochastic"`` or ``"nearest"``: how every write to the store rounds.
        state_precision: ``"fp32"``, ``"bf16"`` or ``"fp16"``: how the optimizer state is
            stored (mpe's ``StateFp32``/``StateBf16``/``StateFp16``; the 16-bit ones are written
            with ``rounding`` and held in FP32 beside a cached row); ``STATE_PRECISIONS``.
        optimizer: ``"sgd"``, ``"rowwise_adagrad"`` (FBGEMM's EXACT_ROWWISE_ADAGRAD),
            ``"adagrad"`` or ``"adam"`` (sparse/lazy, FBGEMM's ADAM), fused into backward.
        learning_rate: the optimizer's learning rate (change it with ``set_learning_rate``).
        eps: the optimizer's epsilon; default mpe's (1e-8 for rowwise_adagrad and adam, 1e-10
            for adagrad).
        beta1, beta2: Adam's moment decays.
        pooling_mode: ``"sum"`` or ``"mean"`` (or fbgemm_gpu's ``PoolingMode.SUM`` / ``.MEAN``).
        seed: seed of the stochastic-rounding stream and of ``init_uniform``; group 0 uses it
            as given, other groups a stream derived from it.
        non_finite: ``"raise"`` (default): a NaN or infinite output gradient or per-sample
            weight, or a step whose summed gradient, optimizer state or update overflows,
            raises ValueError and changes nothing; ``"skip"`` (mpe's ``NonFinite::Skip``): such
            a training forward returns what the weights give, and its backward skips the whole
            step (no weight, optimizer state or ``step`` changes; counted in
            ``stats()["skipped_steps"]``). The decision is this module's, from its own
            gradients. Its optimizer, fused into backward, applies the gradient it is given:
            under loss scaling (``torch.amp.GradScaler``) that is the scaled gradient, and the
            scaler's decision to skip the dense step does not reach it. An eval forward
            refuses a non-finite weight either way. ``load_state_dict`` keeps the module's own
            setting.
        slot_index: ``True``: each group with a cache keeps a row -> cache slot index (mpe's
            ``EmbeddingConfig::slot_index``, its entries in the store rows: 4 bytes per row of
            the table, counted in ``memory()["store_bytes"]``), so an eval forward finds each
            index's cached row with one load instead of a scan of its set; outputs and training
            are the same bits either way. Default ``False``. Configuration, not state: ``load_state_dict`` keeps the
            module's own setting.
        defer_admission: ``True``: a training forward only finds each index's cached row and
            pools the others from the store; its batch's cache admission (fills, evictions,
            write-backs) runs at the start of its backward (mpe's
            ``EmbeddingConfig::defer_admission``), or, where that backward never comes or fails,
            at the next training forward: training gives the same bits either way, and
            ``stats()`` counts a batch when it is admitted. Default ``False``. Configuration,
            not state: ``load_state_dict`` keeps the module's own setting.
        row_keys: ``None`` (default) or a sequence of T integers: the row each table's row 0
            is in a larger table set (mpe's ``MixedDimConfig::row_keys``), so that a table
            placed on this module by sharding (TorchRec table-wise: a rank holds whole tables)
            rounds stochastically and initializes with exactly the bits it has in the unsharded
            set: give each table its first row there (the sum of the rows of the set's tables
            before it). With row keys every group uses ``seed`` as given (no derived seed).
        column_keys: ``None`` (default) or a sequence of T integers, each >= 0 and a multiple of
            4: the column of the full table that each table's column 0 is (mpe's
            ``MixedDimConfig::column_keys``), for a column slice ``[c0, c0 + D)`` of a wider table
            (TorchRec column-wise sharding): c0. The optimizer state of a ``"bf16"`` or ``"fp16"``
            ``state_precision`` ignores it. Row and column keys are configuration, recorded in
            the state's ``_extra_state`` but not compared by ``load_state_dict``.
        weights_init: how the tables start (``WEIGHTS_INITS`` or ranges), drawn at construction
            by ``init_uniform`` (mpe's Philox stream from ``seed``, keyed by ``row_keys`` /
            ``column_keys``: the same seed gives the same bits whatever the thread count),
            stored with ``rounding``:

            - ``"uniform"`` (default): each table U(-sqrt(1/rows), sqrt(1/rows)), rows being that
              table's row count, as TorchRec's ``EmbeddingBagConfig`` initialises by default;
            - ``"zeros"``: every weight 0 (nothing is drawn);
            - ``(low, high)``: every table U(low, high), i.e. ``init_uniform(low, high)``;
            - ``[(low_0, high_0), ..., (low_{T-1}, high_{T-1})]``: table t U(low_t, high_t).

            ``init_uniform`` and ``set_weights`` replace the weights later; ``load_state_dict``
            replaces them with the state's.
        device: ``None`` or ``"cpu"`` (default: mpe's host backend), ``"cuda"``, ``"cuda:N"`` or a
            ``torch.device``: mpe's CUDA backend on that device (``"cuda"``: the current one), for
            the combinations of ``built_combinations(device="cuda")``. The module's work is queued
            on the CUDA stream current when it is built; a call made while another stream is
            current is ordered after that stream's work and before its later work by CUDA events
            (no host wait). The same seed and inputs give the same bits as on the CPU.
            ``.to(device)``, ``.cuda()`` and ``.cpu()`` move the exact state later.
        store_placement: where a CUDA module's store lives (``STORE_PLACEMENTS``): ``"device"``
            (default: device memory from torch's caching allocator), ``"host_mapped"`` (pinned host
            memory mapped into the device: no device memory for the store, every access crosses
            the interconnect) or ``"managed"`` (CUDA managed memory, preferred location host).
            The cache, optimizer state and workspaces are device memory always. A CPU module takes
            the default only; kept across moves (it applies while the module is on a CUDA device).
        max_range_growth: ``0.0`` (default: off) or g in (0, 1] for the ``"int8"``, ``"int4"`` and
            ``"int2"`` stores (mpe's ``EmbeddingConfig::max_range_growth``): an optimizer update
            of a store row (not of a cached row) clamps each new value into
            ``[lo - g (hi - lo), hi + g (hi - lo)]``, lo and hi the ends of the row's grid
            before the step, then quantizes it. It bounds how fast a row's range can grow:
            with ``"int2"`` (4 levels) and stochastic rounding an unbounded row widens on most
            updates, every widening re-rounds the whole row, and training can run away to the
            label-mean loss at the learning rate FP32 trains best at; 0.01 trains there on the
            real sets of examples/train_dlrm/tables/real_int2_range_growth.md. Rows held in the
            FP32 cache are updated unbounded and written back as they are: with a large cache
            the bound does little. A nonzero value below float32's smallest (it would round to
            0, i.e. off) is refused. Same bits on the CPU and CUDA. Configuration, not state:
            ``load_state_dict`` keeps the module's own setting.

    Raises:
        ValueError: bad specs or hyperparameters (mpe's message), an unknown name (the
            message lists the valid ones), or a storage/cache/rounding/state_precision
            combination that is not built (the message names it, the nearest built ones, see
            ``built_combinations()``, and where to build it), a ``seed`` outside [0, 2**64).
        ValueError: ``row_keys`` or ``column_keys`` not of length T, or a key outside [0, 2**63),
            negative, not leaving room for its table's rows (row keys) or not a multiple of 4
            (column keys), named with its value.
        TypeError: ``specs`` is not a list of ``(rows, D)`` integer pairs, or ``seed`` is not
            an integer, or ``row_keys`` or ``column_keys`` is not a sequence of integers, or
            ``slot_index`` or ``defer_admission`` is not a bool, or
            ``cache_fraction``, ``learning_rate``, ``eps``, ``beta1`` or ``beta2`` is not a real
            number (a bool or a string is not one).
        ValueError: also a hyperparameter whose value float32 cannot hold (beyond its largest
            finite value, or a nonzero value that would round to zero), named with its value.
        ValueError: a ``weights_init`` that is not ``"uniform"``, ``"zeros"``, a (low, high) pair of
            numbers or a list of T of them, or a range that ``init_uniform`` refuses (not finite,
            low >= high, beyond the storage's range), naming ``weights_init`` and its value.
        ValueError: a ``device`` that is not a CPU or CUDA device, a ``store_placement`` not in
            ``STORE_PLACEMENTS`` or other than ``"device"`` on the CPU, or a combination not built
            for CUDA (see ``built_combinations(device="cuda")``).
        ValueError: a ``max_range_growth`` outside [0, 1] or NaN, or > 0 with a storage other
            than ``"int8"``, ``"int4"`` or ``"int2"``, named with its value (a bool or string:
            TypeError).
        RuntimeError: ``device`` a CUDA device where this build has no CUDA module
            (``built_with_cuda()``) or ``torch.cuda.is_available()`` is False.
    """

    def __init__(self, specs, storage="fp32", cache="none", cache_fraction=0.0, rounding="stochastic",
                 optimizer="sgd", learning_rate=0.01, eps=None, beta1=0.9, beta2=0.999, pooling_mode="sum",
                 seed=0, state_precision="fp32", non_finite="raise", slot_index=False, defer_admission=False,
                 row_keys=None, column_keys=None, weights_init="uniform", device=None, store_placement="device",
                 max_range_growth=0.0):
        super().__init__()
        if not isinstance(store_placement, str) or store_placement not in STORE_PLACEMENTS:
            raise ValueError(f"mpe_torch: store_placement = {store_placement!r} is not one of "
                             f"{', '.join(map(repr, STORE_PLACEMENTS))}")
        device = _resolve_device("cpu" if device is None else device)
        if device.type == "cpu" and store_placement != "device":
            raise ValueError(f"mpe_torch: store_placement = {store_placement!r} applies to CUDA modules only (a CPU "
                             "module keeps its store in host memory); give device='cuda' or leave it 'device'")
        pairs = _specs(specs)
        init = _weights_init(weights_init, len(pairs))
        optimizer = _name(optimizer, "optimizer")
        pooling_mode = _name(pooling_mode, "pooling_mode")
        storage, cache, rounding = (_name(storage, "storage"), _name(cache, "cache"), _name(rounding, "rounding"))
        state_precision = _name(state_precision, "state_precision")
        non_finite = _name(non_finite, "non_finite")
        seed = _integer(seed, "seed", "an integer in [0, 2**64)")
        if not 0 <= seed < 2**64:
            raise ValueError(f"mpe_torch: seed = {seed} is outside [0, 2**64)")
        if not isinstance(slot_index, bool):
            raise TypeError(f"mpe_torch: slot_index = {slot_index!r} must be a bool")
        if not isinstance(defer_admission, bool):
            raise TypeError(f"mpe_torch: defer_admission = {defer_admission!r} must be a bool")
        max_range_growth = _real(max_range_growth, "max_range_growth")
        if not 0.0 <= max_range_growth <= 1.0:  # NaN fails too
            raise ValueError(f"mpe_torch: max_range_growth = {max_range_growth!r} must be finite and in [0, 1]")
        if max_range_growth > 0 and storage not in _GRID_STORAGES:
            raise ValueError(f"mpe_torch: max_range_growth = {max_range_growth!r} needs a storage with a per-row "
                             f"grid ({', '.join(map(repr, _GRID_STORAGES))}); storage is {storage!r}")
        keys = {"row_keys": _keys("row_keys", row_keys, len(pairs)),
                "column_keys": _keys("column_keys", column_keys, len(pairs))}
        if eps is None:
            eps = _C.default_eps(optimizer)  # ValueError listing OPTIMIZERS for an unknown name
        cache_fraction, learning_rate = _real(cache_fraction, "cache_fraction"), _real(learning_rate, "learning_rate")
        eps, beta1, beta2 = _real(eps, "eps"), _real(beta1, "beta1"), _real(beta2, "beta2")
        self._config = dict(specs=pairs, storage=storage, cache=cache, cache_fraction=cache_fraction,
                            rounding=rounding, state_precision=state_precision, pooling_mode=pooling_mode,
                            optimizer=optimizer, seed=seed, non_finite=non_finite, slot_index=slot_index,
                            defer_admission=defer_admission, row_keys=keys["row_keys"],
                            column_keys=keys["column_keys"], max_range_growth=max_range_growth)
        self._store_placement = store_placement
        self._tbe = self._new_tbe(device, dict(learning_rate=learning_rate, eps=eps, beta1=beta1, beta2=beta2))
        self._device = device
        # Anchor of the autograd graph (not a parameter: the tables are updated in backward).
        self._anchor = torch.empty(0, device=device, requires_grad=True)
        self._init_weights(init, weights_init)

    def _new_tbe(self, device, params):
        """A new C++ core for ``device`` with this module's configuration and hyperparameters
        ``params`` (learning_rate, eps, beta1, beta2); its tables as the core builds them."""
        c = self._config
        args = (c["specs"], c["storage"], c["cache"], c["cache_fraction"], c["rounding"], c["state_precision"],
                c["pooling_mode"], c["optimizer"], params["learning_rate"], params["eps"], params["beta1"],
                params["beta2"], c["seed"], c["non_finite"], c["slot_index"], c["defer_admission"],
                c["row_keys"] or [], c["column_keys"] or [], c["max_range_growth"])
        try:
            if device.type == "cuda":
                return _C_cuda.Tbe(*args, device.index, self._store_placement)
            return _C.Tbe(*args)
        except ValueError as e:
            short = _short_not_built(e, (c["storage"], c["cache"], c["rounding"], c["state_precision"]), device.type)
            if short is None:
                raise
            raise short from None

    def _move(self, device):
        """Moves the exact state (mpe's checkpoint bytes) to a new core on ``device``; a pending
        training forward is not carried (its backward then raises RuntimeError)."""
        device = _resolve_device(device)
        if device == self._device:
            return
        tbe = self._new_tbe(device, self.optimizer_params)
        tbe.load_state(self._tbe.state())
        self._tbe, self._device = tbe, device
        self._anchor = torch.empty(0, device=device, requires_grad=True)

    @property
    def device(self):
        """The ``torch.device`` the module runs on (``cpu`` or ``cuda:N``): its forward and
        backward tensors live there."""
        return self._device

    @property
    def store_placement(self):
        """Where the store lives while the module is on a CUDA device (``STORE_PLACEMENTS``)."""
        return self._store_placement

    def _host_core(self):
        """A CPU core holding this module's exact state (a CUDA module's FBGEMM exports and imports
        run on it; the CUDA combinations are all built for the CPU). Flushes the cache first, as
        export_table does."""
        self._tbe.flush()
        tbe = self._new_tbe(torch.device("cpu"), self.optimizer_params)
        tbe.load_state(self._tbe.state())
        return tbe

    def _init_weights(self, init, given):
        """Draws the tables as ``weights_init`` says (parsed: ``init``; as given: ``given``)."""
        if init == "zeros":  # the tables start at zero
            return
        try:
            if init == "uniform":  # TorchRec's default: U(-sqrt(1/rows), sqrt(1/rows)) per table
                bounds = [math.sqrt(1.0 / rows) for rows, _ in self._config["specs"]]
                self.init_uniform([-b for b in bounds], bounds)
            elif isinstance(init, tuple):
                self.init_uniform(*init)
            else:
                self.init_uniform([lo for lo, _ in init], [hi for _, hi in init])
        except ValueError as e:  # mpe's range check (finite, low < high, within the storage's range)
            raise ValueError(f"mpe_torch: weights_init = {_shown(given)}: {e}") from None

    # ---- shape ----
    @property
    def num_tables(self):
        """T, the number of tables."""
        return self._tbe.num_tables

    @property
    def total_dim(self):
        """sum D_t, the output's width."""
        return self._tbe.total_dim

    @property
    def specs(self):
        """The ``(rows, D)`` pairs given at construction."""
        return list(self._config["specs"])

    @property
    def num_groups(self):
        """Number of D-groups (mpe CachedEmbedding objects inside the MixedDimEmbedding): one per
        distinct D."""
        return len(self._tbe.groups())

    # ---- forward / backward ----
    def forward(self, indices, offsets, per_sample_weights=None, batch_size_per_feature_per_rank=None):
        r"""Pooled lookup of B bags per table.

        Args:
            indices: ``(n,)`` torch.int64 on the module's device (``device``), contiguous: row ids
                local to their table.
            offsets: ``(T*B + 1,)`` torch.int64, the module's device, contiguous, table-major like
                FBGEMM TBE: bag ``j = t*B + b`` holds ``indices[offsets[j]:offsets[j+1]]`` of table t.
            per_sample_weights: ``None`` or ``(n,)`` torch.float32, the module's device, contiguous, finite,
                not requiring grad (no gradient is computed for them); scales each index
                (``pooling_mode="sum"`` only).

            batch_size_per_feature_per_rank: ``None``, or FBGEMM's variable batch per feature
                (VBE): a list of T lists, ``B[t][r]`` bags of table t from rank r (all of
                equal length R). ``offsets`` then has ``sum_t sum_r B[t][r] + 1`` entries,
                table-major, each table's bags rank 0's first.

        Returns:
            ``(B, sum D_t)`` torch.float32 on the module's device; sample b's table-t vector in columns
            ``[sum_{s<t} D_s, + D_t)``. Empty bags give zeros; mean pooling divides by the bag
            length. With ``batch_size_per_feature_per_rank``: ``(sum_r sum_t B[t][r] * D_t,)``,
            rank-major (for r, for t, B[t][r] rows of D_t), the VBE output TorchRec's
            variable-batch all-to-all takes. mpe pools
            the tables over ``max_t sum_r B[t][r]`` bags each, the missing ones empty (the
            same trained bits as the bags alone: an empty bag adds to no row's gradient).

        In training mode with gradients enabled the call populates the cache and is remembered
        for backward: ``backward`` of this output applies the fused optimizer step once, and
        must come before the next training forward. Otherwise (``eval()`` or ``torch.no_grad()``)
        it only reads (mpe's ``forward_inference``: no cache fill, no statistics).

        On a CUDA device the work is queued (see the constructor's ``device``), but mpe checks
        each batch before it runs: the call waits on the host for that verdict (a few bytes
        copied back), and backward waits likewise for its step's (non-finite gradients, overflow).

        Raises:
            TypeError: an argument that is not a tensor, or a tensor of the wrong dtype.
            ValueError: a tensor not on the module's device (naming it and both devices), wrong
                shape, dimensions or contiguity; offsets not of length
                T*B + 1, not starting at 0, decreasing or not ending at n; an index outside its
                table; non-finite per-sample weights or per-sample weights with mean pooling.
        """
        for name, t in (("indices", indices), ("offsets", offsets), ("per_sample_weights", per_sample_weights)):
            if not torch.is_tensor(t) and not (t is None and name == "per_sample_weights"):
                raise TypeError(f"mpe_torch: {name} must be a torch.Tensor (CPU, contiguous); got "
                                f"{type(t).__name__}")
        if batch_size_per_feature_per_rank is not None:
            plan = self._vbe_plan(batch_size_per_feature_per_rank, offsets)
            return plan.output(self.forward(indices, plan.offsets(offsets), per_sample_weights))
        if self.training and torch.is_grad_enabled():
            return _TbeFunction.apply(self._anchor, self, indices, offsets, per_sample_weights)
        return self._tbe.forward(indices, offsets, per_sample_weights, False)

    def _vbe_plan(self, batch, offsets):
        T = self.num_tables
        try:
            rows = [[_integer(b, "batch_size_per_feature_per_rank", "an integer") for b in per_rank]
                    for per_rank in batch]
        except TypeError as e:
            raise TypeError(f"mpe_torch: batch_size_per_feature_per_rank must be a list of T = {T} lists of "
                            f"bag counts: {e}") from None
        if len(rows) != T or len({len(r) for r in rows}) != 1 or not rows[0]:
            raise ValueError(f"mpe_torch: batch_size_per_feature_per_rank must be T = {T} lists of bag counts, "
                             f"one per rank, all of one length; got {batch!r}")
        if any(b < 0 for r in rows for b in r):
            raise ValueError(f"mpe_torch: batch_size_per_feature_per_rank has a negative bag count: {batch!r}")
        total = sum(sum(r) for r in rows)
        if not torch.is_tensor(offsets) or offsets.dim() != 1 or offsets.numel() != total + 1:
            got = tuple(offsets.shape) if torch.is_tensor(offsets) else type(offsets).__name__
            raise ValueError(f"mpe_torch: offsets has shape {got}; with batch_size_per_feature_per_rank it needs "
                             f"(sum_t sum_r B[t][r] + 1,) = ({total + 1},)")
        plans = self.__dict__.get("_vbe_plans")
        if plans is None:
            plans = self.__dict__["_vbe_plans"] = BagPlanCache(range(T), [d for _, d in self.specs])
        return plans.get(rows, True)

    # ---- optimizer ----
    def set_learning_rate(self, lr):
        """Sets the learning rate used by the following backward steps.

        Raises:
            TypeError: ``lr`` not a real number (a bool or a string is not one).
            ValueError: ``lr`` not finite or negative (mpe's check), or beyond float32's range.
        """
        self._tbe.set_learning_rate(_real(lr, "lr"))

    def get_learning_rate(self):
        """The current learning rate (float32 value)."""
        return self._tbe.learning_rate

    @property
    def optimizer_params(self):
        """Dict: optimizer name, learning_rate, eps, beta1, beta2 (as float32 values)."""
        return dict(self._tbe.optimizer_params())

    @property
    def step(self):
        """Number of applied optimizer steps."""
        return self._tbe.step

    # ---- weights ----
    def init_uniform(self, low, high):
        """Every row ~ U[low, high) from the seed (mpe's Philox stream), stored with the
        module's rounding; the cache is dropped. ``low`` and ``high`` are each a number or a
        sequence of T numbers, one per table (table t's rows ~ U[low[t], high[t]): each row
        gets exactly what ``init_uniform(low[t], high[t])`` gives it, so every table at (l, h)
        is ``init_uniform(l, h)``). With ``row_keys`` / ``column_keys`` a table's rows get the
        bits they get in the set or full table those keys place them in. Raises ValueError
        unless low < high, finite and within the storage's range (and float32's), naming the
        table, or for a sequence whose length is not T; TypeError where a value is not a real
        number."""
        def _sequence(value):
            # A sequence of values (a list, a tuple, a 1-d tensor or array), not a number or a string.
            if isinstance(value, (str, bytes)) or (torch.is_tensor(value) and value.dim() == 0):
                return False
            try:
                len(value)
                iter(value)
            except TypeError:
                return False
            return True

        if not (_sequence(low) or _sequence(high)):
            self._tbe.init_uniform(_real(low, "low"), _real(high, "high"))
            return
        T = self.num_tables
        ranges = []
        for name, value in (("low", low), ("high", high)):
            if _sequence(value):
                seq = list(value)
                if len(seq) != T:
                    raise ValueError(f"mpe_torch: {name} = {value!r} has {len(seq)} values; it needs one per "
                                     f"table, T = {T}")
                ranges.append([_real(v, f"{name}[{t}]") for t, v in enumerate(seq)])
            else:
                ranges.append([_real(value, name)] * T)
        self._tbe.init_uniform_tables(ranges[0], ranges[1])

    def get_weights(self, table):
        """Table ``table``'s rows as a new ``(rows, D)`` float32 tensor on the module's device, read
        through the cache (cached rows in FP32, others dequantized; on a CUDA device read back to
        the host first: the call waits for the module's stream). Raises IndexError for a bad
        table, TypeError for a table that is not an integer."""
        return self._tbe.get_weights(_table_index(table))

    def set_weights(self, table, weights):
        """Replaces table ``table`` with ``weights`` (``(rows, D)`` torch.float32 on the module's
        device, contiguous), quantized with the module's rounding; its cache lines are dropped
        (on a CUDA device the weights are copied to the host first: the call waits for them).
        Optimizer state is kept. Raises TypeError/ValueError for a wrong tensor, ValueError for
        a value the storage cannot hold, IndexError for a bad table (TypeError: not an integer)."""
        self._tbe.set_weights(_table_index(table), weights)

    def copy_rows(self, table, src_rows, dst_rows):
        """Copies row ``src_rows[i]`` of table ``table`` onto row ``dst_rows[i]``, i ascending
        (a later pair reads what an earlier one wrote): the source's current weights (its
        cached FP32 row when cached), quantized into the destination's store row with the
        module's rounding; the destination keeps its optimizer state. ``src_rows``,
        ``dst_rows``: ``(k,)`` int64 CPU tensors (``TieredRows.copy_moved_rows`` passes its
        moves). Synchronous (on a CUDA device each row goes through the host). Every row is
        checked first: IndexError naming the first row outside the table (or a bad table),
        ValueError for unequal lengths, TypeError for a tensor that is not int64; nothing
        changes then."""
        self._tbe.copy_rows(_table_index(table), src_rows, dst_rows)

    def split_embedding_weights(self):
        """List of ``get_weights(t)`` for every table (FBGEMM TBE's name; copies, not views)."""
        return [self.get_weights(t) for t in range(self.num_tables)]

    def flush(self):
        """Writes every dirty cache row back to the store (rounding); rows stay cached."""
        self._tbe.flush()

    # ---- FBGEMM / TorchRec layouts ----
    def export_table(self, table, layout="fbgemm_fused", format=None, alignment=1, scale_bias_last=False):
        r"""Table ``table``'s rows in an FBGEMM layout, as a ``(rows, row_bytes)`` uint8 tensor.

        Args:
            layout: ``"fbgemm_fused"``: FBGEMM's fused row-wise rows (int8: D codes, f32 scale,
                f32 bias, as ``torch.ops.fbgemm.FloatToFused8BitRowwiseQuantized``; int4:
                ceil(D/2) bytes, f16 scale, f16 bias, as ``FloatToFusedNBitRowwiseQuantizedSBHalf``;
                int2: ceil(D/4) bytes, f16 scale, f16 bias, the same op with bit rate 2;
                fp16/bf16/fp32: plain rows). ``"tbe_inference"``: the weights of fbgemm_gpu's
                ``IntNBitTableBatchedEmbeddingBagsCodegen`` / TorchRec's quantized EBC (f16 scale,
                f16 bias, then the codes, each row padded to ``alignment``; fp32, fp16, int8,
                int4 and int2 rows only: no bf16).
            format: ``None`` (the store's own format: a byte move, except int8 to
                ``tbe_inference``, which re-quantizes to f16 scale/bias), or ``"fp32"``,
                ``"fp16"``, ``"bf16"``, ``"int8"``, ``"int4"``, ``"int2"`` (``EXPORT_FORMATS``: dequantize and
                re-encode, round to nearest). FBGEMM has no FP8 row layout: an fp8_e4m3/fp8_e5m2
                store exports only converted (``format=`` one of these), and ``format=None``
                raises ValueError saying so.
            alignment: ``fbgemm_fused``: int8 code padding (1 = FBGEMM's CPU op, 4 = its CUDA
                op); ``tbe_inference``: row alignment (1 = the TBE's CPU default, 16 = CUDA).
            scale_bias_last: ``tbe_inference`` with FBGEMM's ``reverse_qparam``.

        Flushes the cache first (dirty rows are written back, counted in ``stats()``). Returns a
        CPU tensor on every device (a CUDA module's rows are converted on the host, from a CPU
        copy of its state).
        Raises ValueError (bad layout/format/alignment, a format without that layout, a value
        the format cannot hold), IndexError (bad table), TypeError (a table that is not an integer).
        """
        tbe = self._tbe if self._device.type == "cpu" else self._host_core()
        return tbe.export_table(_table_index(table), layout, int(alignment), bool(scale_bias_last),
                                "" if format is None else str(format))

    def import_table(self, table, data, layout="fbgemm_fused", alignment=1, scale_bias_last=False):
        """Replaces table ``table`` with ``data``: a ``(rows, row_bytes)`` torch.uint8 CPU
        contiguous tensor in ``layout`` (see ``export_table``) of the store's own format (int8
        reads fused 8-bit or TBE INT8, int4 fused 4-bit or TBE INT4, int2 fused 2-bit or TBE
        INT2, fp32/fp16 plain rows in both layouts, bf16 plain rows in ``fbgemm_fused``; an FP8
        store, or bf16 with ``tbe_inference``, raises ValueError: FBGEMM has no such rows). Exact byte conversion;
        rows decoding beyond the format's range by at most one quantization step (FBGEMM's
        quantizers near +-65504) are saturated and counted. Every row is validated before
        anything changes; the table's cache lines are dropped. Returns the number of saturated
        rows. ``data`` is a CPU tensor on every device: a CUDA module imports on a CPU copy of its
        state and then loads that state (as ``load_state_dict`` does: a pending training forward
        is dropped). Raises TypeError/ValueError for a wrong tensor or a row the store cannot hold
        (naming row and value), IndexError for a bad table (TypeError: not an integer)."""
        if self._device.type == "cpu":
            return self._tbe.import_table(_table_index(table), data, layout, int(alignment), bool(scale_bias_last))
        host = self._host_core()
        saturated = host.import_table(_table_index(table), data, layout, int(alignment), bool(scale_bias_last))
        self._tbe.load_state(host.state())
        return saturated

    # ---- statistics ----
    def stats(self):
        """Dict of cumulative cache counters summed over groups (mpe::CacheStats: lookups,
        unique_rows, hits, misses, conflict_misses, evictions, writebacks, lfu_rejections,
        saturated_rows, bytes_filled, bytes_written_back, skipped_steps)."""
        return dict(self._tbe.stats())

    def reset_stats(self):
        """Zeroes the counters of ``stats()``."""
        self._tbe.reset_stats()

    def memory(self):
        """Dict of bytes as allocated, summed over groups: store_bytes, cache_bytes,
        optimizer_bytes, metadata_bytes, workspace_bytes, embedding_bytes (store + cache +
        metadata) and total_bytes."""
        return dict(self._tbe.memory())

    def groups(self):
        """List of dicts, one per group (distinct D): dim, tables (spec indices), type
        (``storage/cache/rounding/state_precision`` as mpe names them), cache_slots, seed, stats,
        memory."""
        return [dict(g) for g in self._tbe.groups()]

    # ---- state_dict ----
    def _state_keys(self, prefix):
        return [f"{prefix}mpe_state"]

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """State: ``mpe_state`` = mpe's checkpoint bytes (uint8, ``MixedDimEmbedding::save_bytes``,
        format MPEMIXD1: the table specs and, per D-group, its MPECKPT1 checkpoint with store,
        cache, optimizer state, step, seed and counters), built in memory, a CPU tensor on every
        device (the same bytes on the CPU and on a CUDA device, so a state saved on one loads on
        the other); ``_extra_state`` = the configuration and the optimizer's hyperparameters."""
        destination[prefix + "mpe_state"] = self._tbe.state()
        destination[prefix + "_extra_state"] = self.get_extra_state()

    def get_extra_state(self):
        return dict(format=_STATE_FORMAT, config=dict(self._config), optimizer_params=self.optimizer_params)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """All or nothing: the configuration is compared first, then mpe verifies all of the
        bytes (every group's checkpoint loaded into a new object) before swapping them in."""
        keys = self._state_keys(prefix)
        extra_key = prefix + "_extra_state"
        # A state of another format (format 1: `mpe_group_<g>` tensors) is named before its
        # keys are compared, whatever `strict` is.
        extra = state_dict.get(extra_key)
        if extra_key in state_dict:
            if not isinstance(extra, dict) or "format" not in extra:
                raise ValueError(f"mpe_torch: {extra_key} is not an mpe_torch state (a dict with a 'format'); "
                                 f"got {type(extra).__name__}{'' if extra is None else ' without a format'}")
            if extra["format"] != _STATE_FORMAT:
                raise ValueError(f"mpe_torch: {extra_key} has state format {extra['format']!r}; this mpe_torch "
                                 f"reads format {_STATE_FORMAT} (format 1, written before the module used "
                                 "mpe::MixedDimEmbedding, held one tensor per D-group and is not read)")
        wanted = keys + [extra_key]
        absent = [k for k in wanted if k not in state_dict]
        if absent:
            if len(absent) < len(wanted):
                # One half without the other: loading nothing while `strict=False` reports only
                # a missing key would quietly keep this module's weights.
                present = [k for k in wanted if k in state_dict]
                raise ValueError(f"mpe_torch: the state has {', '.join(present)} but not {', '.join(absent)}; "
                                 "both are needed to load it, nothing was loaded")
            missing_keys.extend(absent)
            return
        if not (torch.is_tensor(state_dict[keys[0]]) and state_dict[keys[0]].dtype == torch.uint8):
            raise ValueError(f"mpe_torch: {keys[0]} must be a uint8 tensor of mpe's checkpoint bytes, got "
                             f"{type(state_dict[keys[0]]).__name__}")
        if strict:
            for k in state_dict:
                if k.startswith(prefix) and k not in keys and k != extra_key and "." not in k[len(prefix):]:
                    unexpected_keys.append(k)
        mine, theirs, p = self._config, extra.get("config"), extra.get("optimizer_params")
        # Its structure is checked before any field is read: a damaged or hand-made one is a
        # ValueError naming the key, not a KeyError or TypeError from deep inside.
        hyper = ("learning_rate", "eps", "beta1", "beta2")
        if not isinstance(theirs, dict) or not isinstance(p, dict) or any(
                k not in p or isinstance(p[k], bool) or not isinstance(p[k], (int, float)) for k in hyper):
            raise ValueError(f"mpe_torch: {extra_key} is malformed: it needs a 'config' dict and an "
                             f"'optimizer_params' dict with numbers {', '.join(hyper)}; got config "
                             f"{type(theirs).__name__}, optimizer_params {p!r}")
        for field in ("specs", "pooling_mode", "optimizer"):
            a, b = mine[field], theirs.get(field)
            if field == "specs" and b is not None:
                try:
                    b = [tuple(x) for x in b]
                except TypeError:
                    raise ValueError(f"mpe_torch: {extra_key}'s specs = {b!r} is not a list of (rows, dim) "
                                     "pairs") from None
            if a != b:
                raise ValueError(f"mpe_torch: the state's {field} = {b!r} differs from this module's {a!r}")
        old = self.optimizer_params
        self._tbe.set_hyperparameters(p["learning_rate"], p["eps"], p["beta1"], p["beta2"])  # checks them
        try:
            state = state_dict[keys[0]]
            self._tbe.load_state(state if state.device.type == "cpu" else state.cpu())  # bytes, wherever held
            self._config["seed"] = int(self._tbe.groups()[0]["seed"])  # the state's, as mpe's load does
        except BaseException:
            self._tbe.set_hyperparameters(old["learning_rate"], old["eps"], old["beta1"], old["beta2"])
            raise

    def extra_repr(self):
        c = self._config
        return (f"specs={c['specs']}, storage={c['storage']!r}, cache={c['cache']!r}, "
                f"cache_fraction={c['cache_fraction']}, rounding={c['rounding']!r}, "
                f"state_precision={c['state_precision']!r}, "
                f"pooling_mode={c['pooling_mode']!r}, optimizer={c['optimizer']!r}, "
                f"learning_rate={self.get_learning_rate():g}, non_finite={c['non_finite']!r}, "
                f"slot_index={c['slot_index']}, defer_admission={c['defer_admission']}, " +
                (f"max_range_growth={c['max_range_growth']:g}, " if c["max_range_growth"] > 0 else "") +
                f"groups={self.num_groups}" +
                ("" if self._device.type == "cpu" else
                 f", device={str(self._device)!r}, store_placement={self._store_placement!r}"))
