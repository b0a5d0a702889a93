# SPDX-License-Identifier: Apache-2.0
"""mpe's tables inside TorchRec: a sharder for ``EmbeddingBagCollection``.

``EmbeddingBagCollectionSharder`` lets ``DistributedModelParallel`` (DMP) place and shard a
plain ``torchrec.EmbeddingBagCollection`` whose tables live in mpe's low-precision stores
with an FP32 cache, trained by mpe's fused backward::

    from mpe_torch.torchrec import EmbeddingBagCollectionSharder, planner
    sharder = EmbeddingBagCollectionSharder(
        fused_params=dict(storage="int8", cache="lru", cache_fraction=0.05,
                          optimizer="rowwise_adagrad", learning_rate=0.05, seed=1),
        table_options={"t_small": dict(storage="fp16", cache="none")})
    plan = planner(world_size=2, sharder=sharder, compute_device="cpu").collective_plan(model, [sharder], pg)
    model = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan,
                                     sharders=[sharder])

**Devices.** The kernels run where DMP's ``device`` says: ``cpu`` (mpe's host backend) or
``cuda:N`` (mpe's CUDA backend, ``TableBatchedEmbeddingBags(..., device="cuda:N")``; needs
``mpe_torch.built_with_cuda()`` and a visible GPU, else ``shard`` raises RuntimeError naming
the reason). On CUDA the per-table option ``store_placement`` (default ``"device"``) puts a
kernel's store in HBM or in host memory (``"host_mapped"``, ``"managed"``); its cache,
optimizer state and metadata are HBM always. A CPU kernel ignores ``store_placement`` (its
store is host memory). Plan with ``planner(..., compute_device="cuda",
hbm_bytes_per_rank=...)`` or ``sharding_plan(..., compute_device="cuda")``.

It plugs in the way TorchRec admits third-party kernels: every table's ``ParameterSharding``
has ``compute_kernel = EmbeddingComputeKernel.CUSTOMIZED_KERNEL``, the sharder returns
``ShardedEmbeddingBagCollection`` (a subclass of TorchRec's) whose lookups build
``MpeEmbeddingBag`` kernels (one ``mpe_torch.TableBatchedEmbeddingBags`` per group of tables
with the same options), and TorchRec's own input and output distribution (all-to-alls,
gradient division) is unchanged.

**Sharding types:** table-wise and column-wise (``sharding_types``). Row-wise needs a
reduce-scatter of pooled partial sums, which the gloo backend lacks and whose sums would not
be the unsharded bits; it is not offered.

**Exactness.** Every table's row r rounds with the Philox stream of its row in the whole
collection (the tables' rows concatenated in the EBC's order: ``row_keys``) and, in a column
slice, of its columns (``column_keys``); every table initialises from that stream too
(U(weight_init_min, weight_init_max) of its EmbeddingBagConfig). So with the same seed a
sharded model trains the bits of one ``TableBatchedEmbeddingBags`` over the whole collection
(built with ``row_keys`` of the tables' offsets) fed the global batch: table-wise for every
storage format and optimizer, column-wise for the element-wise formats (fp32, fp16, bf16)
with an optimizer whose state is per element or absent (sgd, adagrad, adam; FP32 state). A
row-wise quantized format sharded by columns quantizes each column slice on its own (a scale
and bias per slice), and row-wise Adagrad keeps one state value per row of each slice (as
TorchRec's fused kernel does): each their own bits. A cache is per kernel (its size a
fraction of the kernel's rows), so cached training equals the unsharded bits only where the
caches make the same decisions.

**Frequency tiers.** ``table_options[name]["tiers"]`` (a dict of ``TIER_FIELDS``, the
arguments of ``mpe_torch.TieredRows`` but ``ids``, which is the table's ``num_embeddings``)
gives a table ``private_rows + shared_rows`` physical rows and an ``mpe_torch.TieredRows`` in
front of each of its shards: in training with gradients a kernel maps the batch's ids of the
table (one ``map`` over all its features) and copies the promoted rows before its lookup; in
evaluation it looks up. The map depends on the set of ids of each batch only, so every shard
of a table (table- or column-wise) keeps the one-process map of the global batch, and the
collection's rows are keyed by the tables' physical rows: a sharded run trains the bits of
one ``TableBatchedEmbeddingBags`` (physical rows) with a ``TieredRows`` per tiered table.
``None`` means untiered; the fields, and ``private_rows + shared_rows <= num_embeddings``, are
checked on every rank when DMP shards. The plan in the state dict records each tiered table's
resolved map configuration, so a state loads only into a model with the same tiers.

**Errors.** Option names and values are checked when the sharder is made, plans when DMP
shards (every rank alike); a batch a kernel refuses (an index outside its table, a
non-finite gradient) is refused by that kernel, after kernels before it in the lookup have
run: all-or-nothing holds per kernel, not across the model.

**Checkpoints.** ``state_dict()`` holds, per rank, each kernel's exact mpe state
(``<prefix>_mpe.rank<r>.<k>.mpe_state``: mpe's checkpoint bytes as ``bytes``, ``.config``: its
configuration and hyperparameters as JSON text, and ``.tiers<t>``: the MPETIER1 bytes of its
table t's map, for a tiered table), the plan
(``<prefix>_mpe_plan``, the same on every rank) and, readable as TorchRec users read them,
``<prefix>embedding_bags.<table>.weight``: a ShardedTensor of the table's ``(rows, D)``
float32 weights as the module reads them (cached rows in FP32, others dequantized; a tiered
table's is its ``(private_rows + shared_rows, D)`` physical rows: id i reads row ``row_of(i)``
of its map, ``tiers()``, and ``MpeEmbeddingBag.logical_weights()`` gives ``(ids, D)``). Loading
(``load_state_dict``, or ``torch.distributed.checkpoint`` then ``load_state_dict``) checks the
plan first (another plan or world size is refused naming both), verifies every kernel's
bytes, and replaces nothing on any rank unless every rank can load; the ``weight`` entries
are not loaded (the exact state is).
"""
import json

import torch
import torch.distributed as dist
from torch import nn

try:
    import torchrec  # noqa: F401
except ImportError as e:  # pragma: no cover - only without torchrec
    raise ImportError("mpe_torch.torchrec needs torchrec (pip install torchrec --no-deps and its pure-Python "
                      "dependencies, see python/README.md)") from e

from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor, ShardedTensorMetadata
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor.metadata import TensorProperties
from torchrec.distributed.embedding_kernel import BaseEmbedding
from torchrec.distributed.embedding_lookup import GroupedPooledEmbeddingsLookup
from torchrec.distributed.embedding_types import EmbeddingComputeKernel
from torchrec.distributed.embeddingbag import (EmbeddingBagCollectionSharder as _TorchrecSharder,
                                               ShardedEmbeddingBagCollection as _TorchrecSharded)
from torchrec.distributed.types import ShardingType
from torchrec.modules.embedding_configs import PoolingType, pooling_type_to_pooling_mode
from torchrec.optim.fused import FusedOptimizer, FusedOptimizerModule

import mpe_torch as _mpe
from . import STORE_PLACEMENTS, TableBatchedEmbeddingBags, _Movable
from ._args import _integer
from ._layout import BagPlanCache
from ._tiered import TieredRows, _planned_tier_bytes, _tier_config

__all__ = ["EmbeddingBagCollectionSharder", "ShardedEmbeddingBagCollection", "MpeEmbeddingBag", "MPE_KERNEL",
           "SHARDING_TYPES", "OPTION_NAMES", "COMPUTE_DEVICES", "table_wise", "column_wise", "sharding_plan", "planner",
           "shard_bytes", "shard_storage", "TIER_FIELDS"]

MPE_KERNEL = EmbeddingComputeKernel.CUSTOMIZED_KERNEL.value
SHARDING_TYPES = (ShardingType.TABLE_WISE.value, ShardingType.COLUMN_WISE.value)
# TableBatchedEmbeddingBags' keyword arguments a table may set (the sharder sets specs,
# pooling_mode, row_keys and column_keys itself).
OPTION_NAMES = ("storage", "cache", "cache_fraction", "rounding", "optimizer", "learning_rate", "eps", "beta1",
                "beta2", "seed", "state_precision", "non_finite", "slot_index", "defer_admission", "store_placement",
                "max_range_growth")
# The fields of a table's "tiers" option (table_options only): mpe_torch.TieredRows' arguments
# but ids, which is the table's num_embeddings.
TIER_FIELDS = ("private_rows", "shared_rows", "promote_at", "demote_below", "decay_every", "sketch_width", "seed")
# Where the kernels run: DMP's device type and the planner's compute_device.
COMPUTE_DEVICES = ("cpu", "cuda")
_FUSED_KEY = "mpe_options"  # the resolved options in TorchRec's per-table fused_params


def _check_options(options, where):
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"mpe_torch.torchrec: {where} must be a dict of TableBatchedEmbeddingBags options, got "
                        f"{type(options).__name__}")
    bad = [k for k in options if k not in OPTION_NAMES and k != "tiers"]
    if "weights_init" in bad:
        raise ValueError(f"mpe_torch.torchrec: {where} sets weights_init; a sharded table starts "
                         "U(weight_init_min, weight_init_max) of its EmbeddingBagConfig: set the range there")
    if bad:
        raise ValueError(f"mpe_torch.torchrec: {where} has unknown option(s) {', '.join(map(repr, bad))}; valid: "
                         f"{', '.join(OPTION_NAMES)}")
    options = dict(options)
    opt = options.get("optimizer")
    name = getattr(opt, "name", None)  # fbgemm_gpu's EmbOptimType, as TorchRec users pass it
    if isinstance(name, str) and name.upper() in _EMB_OPTIM_TYPES:
        options["optimizer"] = _EMB_OPTIM_TYPES[name.upper()]
    return options


# fbgemm_gpu's EmbOptimType names -> mpe's optimizers (the same updates).
_EMB_OPTIM_TYPES = {"EXACT_SGD": "sgd", "SGD": "sgd", "EXACT_ROWWISE_ADAGRAD": "rowwise_adagrad",
                    "EXACT_ADAGRAD": "adagrad", "ADAM": "adam"}


def _check_tiers(tiers, where, ids=None):
    """A table's ``tiers`` option: None (not tiered) or a dict of TIER_FIELDS with integer values
    (private_rows and shared_rows required); returns the dict or None. With ``ids`` (the
    table's, or a shard's rows) also every field's range (``TieredRows``' constructor's) and
    private_rows + shared_rows <= ids, and a dict may carry ``ids`` if it equals them (a
    ``TieredRows.config``); returns the resolved configuration then. Without ``ids`` the
    ranges are checked when DMP shards."""
    if tiers is None:
        return None
    if not isinstance(tiers, dict):
        raise TypeError(f"mpe_torch.torchrec: {where} must be a dict of {', '.join(TIER_FIELDS)}, got "
                        f"{type(tiers).__name__}")
    bad = [k for k in tiers if k not in TIER_FIELDS and not (k == "ids" and ids is not None)]
    if bad:
        raise ValueError(f"mpe_torch.torchrec: {where} has unknown field(s) {', '.join(map(repr, bad))}; "
                         f"valid: {', '.join(TIER_FIELDS)} (ids is the table's num_embeddings)")
    missing = [k for k in ("private_rows", "shared_rows") if k not in tiers]
    if missing:
        raise ValueError(f"mpe_torch.torchrec: {where} lacks {' and '.join(missing)}")
    tiers = {k: _integer(v, f"{where}[{k!r}]", "an integer") for k, v in tiers.items()}
    if ids is None:
        return tiers
    given = tiers.pop("ids", ids)
    if given != ids:
        raise ValueError(f"mpe_torch.torchrec: {where} has ids = {given}, but the table has {ids}")
    try:
        resolved = _tier_config(ids=ids, **tiers)
    except ValueError as e:
        raise ValueError(f"mpe_torch.torchrec: {where} for its {ids} ids: {e}") from None
    physical = resolved["private_rows"] + resolved["shared_rows"]
    if physical > ids:
        raise ValueError(f"mpe_torch.torchrec: {where} gives private_rows + shared_rows = {physical} rows, "
                         f"more than the table's {ids} ids (untiered, it would be smaller)")
    return resolved


def _validate(options, where, device=None):
    """Builds a tiny module with ``options`` (on ``device``: the CPU by default), so a bad value
    or a combination that is not built is refused when the sharder is made (and, for a CUDA
    device, when it shards: the CUDA module builds fewer combinations), on every rank alike
    (not later by the rank that owns the table)."""
    placement = options.get("store_placement", "device")
    if not isinstance(placement, str) or placement not in STORE_PLACEMENTS:
        raise ValueError(f"mpe_torch.torchrec: {where}: store_placement = {placement!r} is not one of "
                         f"{', '.join(STORE_PLACEMENTS)}")
    try:
        TableBatchedEmbeddingBags([(64, 4)], weights_init="zeros", **_kernel_options(options, device))
    except (ValueError, TypeError) as e:
        raise type(e)(f"mpe_torch.torchrec: {where}: {e}") from None


def _kernel_options(options, device):
    """``options`` as TableBatchedEmbeddingBags takes them on ``device`` (None or a CPU/meta
    device: the CPU, where store_placement does not apply and is dropped)."""
    options = dict(options)
    if device is not None and torch.device(device).type == "cuda":
        options["device"] = torch.device(device)
    else:
        options.pop("store_placement", None)
    return options


def _device_kind(device_type, where):
    if device_type not in COMPUTE_DEVICES:
        raise ValueError(f"mpe_torch.torchrec: {where} = {device_type!r}: mpe's kernels run on "
                         f"{' or '.join(COMPUTE_DEVICES)} devices only")
    return device_type


class MpeEmbeddingBag(_Movable, BaseEmbedding, FusedOptimizerModule):
    """TorchRec's kernel for one group of table shards: one ``TableBatchedEmbeddingBags``.

    Args:
        config: TorchRec's ``GroupedEmbeddingConfig``; ``config.fused_params["mpe_options"]``
            holds the group's resolved options (a tuple of (name, value) pairs).
        table_keys: table name -> the row of its row 0 in the whole collection.
        sharding_type: the group's ``ShardingType`` (mean pooling as TorchRec's kernels do).
        device: where the kernel runs: None, ``cpu`` or ``meta`` (mpe's host backend) or
            ``cuda:N`` (mpe's CUDA backend, its store where the options' ``store_placement``
            says; RuntimeError where CUDA cannot run, as ``TableBatchedEmbeddingBags`` raises).
        tiers: table name -> ``mpe_torch.TieredRows`` arguments (``ids`` included) of the
            tiered tables (None: none); such a table's shard has ``private_rows +
            shared_rows`` rows and its ids go through the map (module docstring).

    ``forward(features)`` takes the KeyedJaggedTensor TorchRec's input distribution gives this
    rank (int64 values on the kernel's device; weights when the EBC is weighted) and returns
    ``(B, sum_f D_f)`` float32 on that device (a tiered table's ids are mapped first: host
    code, so on CUDA the ids are copied to the host and the rows back), or with a variable batch per feature
    (``features.variable_stride_per_key()``) the rank-major ``(sum_r sum_f B[f][r] * D_f,)`` of
    TorchRec's VBE. On CUDA it queues its work (no host round trip; mpe's own waits are
    ``TableBatchedEmbeddingBags``'); a new batch shape's index tensors are built on the host
    once and copied to the device once (``BagPlanCache``).

    Its tables start U(weight_init_min, weight_init_max) of their configs (``reset_parameters``'
    draw, made once at construction). ``.to(device)``, ``.cuda()`` and ``.cpu()`` move its exact
    state between the CPU and a CUDA device (``TableBatchedEmbeddingBags``' moves; inside DMP a
    kernel stays where the plan put it); dtype conversions (``.half()``, ...) and other devices
    raise RuntimeError naming the kernel and the reason.
    """

    _conversion_advice = "choose the format in the sharder's fused_params or table_options instead"

    def __init__(self, config, table_keys, sharding_type=None, device=None, tiers=None):
        super().__init__()
        self._config = config
        options = dict(config.fused_params[_FUSED_KEY])
        tables = config.embedding_tables
        self._tables = tables
        specs, row_keys, column_keys, feature_table = [], [], [], []
        self._maps = {}  # table index -> TieredRows (a plain dict: the maps' state is written by the hook)
        for i, t in enumerate(tables):
            md = t.local_metadata
            row0, col0 = (md.shard_offsets[0], md.shard_offsets[1]) if md is not None else (0, 0)
            rows = t.local_rows
            if tiers and t.name in tiers:
                # Table- and column-wise shards hold every row: the map covers the table's ids.
                self._maps[i] = TieredRows(**tiers[t.name])
                rows = self._maps[i].physical_rows
            specs.append((rows, t.local_cols))
            row_keys.append(table_keys[t.name] + row0)
            column_keys.append(col0)
            feature_table.extend([i] * t.num_features())
        mode = pooling_type_to_pooling_mode(config.pooling, sharding_type)
        # Drawn once, at construction: reset_parameters()'s ranges as weights_init (the same bits).
        self.tbe = TableBatchedEmbeddingBags(specs, pooling_mode=mode.name.lower(), row_keys=row_keys,
                                             column_keys=column_keys, weights_init=self._init_ranges(),
                                             **_kernel_options(options, device))
        self._direct = feature_table == list(range(len(tables)))  # one feature per table
        self._feature_table = feature_table
        # Per table the ids its features may hold (a tiered table's ids, else its rows), and per
        # tiered table its features.
        self._id_limits = [t.num_embeddings if i in self._maps else rows for i, (t, (rows, _))
                           in enumerate(zip(tables, specs))]
        self._features_of = {i: [f for f, ft in enumerate(feature_table) if ft == i] for i in self._maps}
        self._plans = BagPlanCache(feature_table, [d for _, d in specs])
        self._optimizer = _MpeFusedOptimizer(self.tbe)

    @property
    def config(self):
        return self._config

    @property
    def _device(self):  # _Movable's: where the tables are (the child module moves them)
        return self.tbe.device

    def _move(self, device):
        pass  # nn.Module._apply moves the child TableBatchedEmbeddingBags (its exact state)

    def _init_ranges(self):
        return [(t.get_weight_init_min(), t.get_weight_init_max()) for t in self._tables]

    def reset_parameters(self):
        """Every table U(weight_init_min, weight_init_max) of its config, from the module's seed
        (keyed by the rows' place in the collection: the same bits however it is sharded). The
        kernel starts so (its ``weights_init``); this draws the same weights again."""
        ranges = self._init_ranges()
        self.tbe.init_uniform([lo for lo, _ in ranges], [hi for _, hi in ranges])

    def forward(self, features, vbe_output=None, vbe_output_offsets=None):
        if vbe_output is not None:
            raise NotImplementedError("MpeEmbeddingBag returns its own output; its lookup merges VBE outputs")
        weights = features.weights_or_none()
        if weights is not None and not torch.is_floating_point(weights):
            weights = None
        values, offsets = features.values(), features.offsets()
        if self._maps:
            values = self._map_ids(features, values)
        variable = features.variable_stride_per_key()
        if self._direct and not variable:
            return self.tbe(values, offsets, weights)
        batch = features.stride_per_key_per_rank() if variable else [[features.stride()]] * len(features.keys())
        plan = self._plans.get(batch, variable)
        return plan.output(self.tbe(values, plan.offsets(offsets), weights))

    def _map_ids(self, features, values):
        """The batch's values with each tiered table's ids replaced by their physical rows: in
        training with gradients each map counts, promotes and decays (one map() per table over
        all its features' ids) and its promoted rows are copied; else a lookup. Every feature's
        ids are checked against its table first, so a refused batch changes no map."""
        bounds = features.offset_per_key()
        keys = features.keys()
        for f, t in enumerate(self._feature_table):
            a, b = bounds[f], bounds[f + 1]
            if b > a:
                ids = values[a:b]
                limit = self._id_limits[t]
                bad = ((ids < 0) | (ids >= limit)).nonzero()
                if bad.numel():
                    i = int(bad[0, 0])
                    raise IndexError(f"mpe_torch.torchrec: feature {keys[f]!r} of table {self._tables[t].name!r} has "
                                     f"id {int(ids[i])} (at position {i} of its ids in this batch) outside "
                                     f"[0, {limit})")
        train = self.training and torch.is_grad_enabled()
        values = values.clone()
        for t, m in self._maps.items():
            spans = [(bounds[f], bounds[f + 1]) for f in self._features_of[t]]
            ids = torch.cat([values[a:b] for a, b in spans])
            rows = m.map(ids) if train else m.lookup(ids)
            at = 0
            for a, b in spans:
                values[a:b] = rows[at:at + b - a]
                at += b - a
            if train:
                m.copy_moved_rows(self.tbe, t)
        return values

    def tiers(self):
        """This kernel's tiered tables: table name -> its ``mpe_torch.TieredRows`` (the map in
        front of the shard; its ``stats()`` count this kernel's training batches)."""
        return {self._tables[t].name: m for t, m in self._maps.items()}

    def logical_weights(self):
        """Each local table shard's weights as its ids read them, ``(ids, local_cols)`` float32
        copies on the kernel's device (synchronous): a tiered table's id i reads its physical row
        ``row_of(i)`` (materialises ids x local_cols floats); an untiered table's as ``weights()``."""
        out = []
        for i, w in enumerate(self.weights()):
            m = self._maps.get(i)
            if m is not None:
                w = w[m.lookup(torch.arange(m.config["ids"], dtype=torch.int64)).to(w.device)]
            out.append(w)
        return out

    # TorchRec's kernel interface: no torch parameters (the tables are mpe's), nothing to flush
    # (a cached row is part of the exact state), nothing to purge.
    def named_parameters_by_table(self):
        return iter(())

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        # TorchRec reads a kernel's state dict as table weights; the exact state is written by
        # ShardedEmbeddingBagCollection's hook instead.
        return destination if destination is not None else {}

    def flush(self):
        pass

    def purge(self):
        pass

    @property
    def fused_optimizer(self):
        return self._optimizer

    def weights(self):
        """Each local table shard's weights, ``(local_rows, local_cols)`` float32 (copies); a
        tiered table's ``(private_rows + shared_rows, local_cols)`` physical rows."""
        return [self.tbe.get_weights(i) for i in range(len(self._tables))]


class _MpeFusedOptimizer(FusedOptimizer):
    """The kernel's optimizer as TorchRec's fused optimizers present theirs: the update runs in
    backward; ``param_groups[0]["lr"]`` is the learning rate, applied to the next backward by
    ``step()`` (so TorchRec's and torch's LR schedulers work)."""

    def __init__(self, tbe):
        self._tbe = tbe
        super().__init__({}, {}, [{"params": [], "lr": tbe.get_learning_rate()}])

    def step(self, closure=None):
        lr = float(self.param_groups[0]["lr"])
        if lr != self._tbe.get_learning_rate():
            self._tbe.set_learning_rate(lr)

    def zero_grad(self, set_to_none=False):
        pass


class _MpeLookup(GroupedPooledEmbeddingsLookup):
    """TorchRec's pooled lookup whose kernels are MpeEmbeddingBag."""

    def __init__(self, table_keys, tiers, **kwargs):
        object.__setattr__(self, "_mpe_table_keys", table_keys)
        object.__setattr__(self, "_mpe_tiers", tiers)
        super().__init__(**kwargs)

    def _create_embedding_kernel(self, config, device, pg, sharding_type, env):
        if config.compute_kernel != EmbeddingComputeKernel.CUSTOMIZED_KERNEL:
            raise ValueError(f"mpe_torch.torchrec: table(s) {config.table_names()} have compute kernel "
                             f"{config.compute_kernel.value}; mpe's sharder runs '{MPE_KERNEL}' only")
        return MpeEmbeddingBag(config, self._mpe_table_keys, sharding_type, device, self._mpe_tiers)

    def forward(self, sparse_features):
        # With a variable batch per feature and several kernels, each kernel's rank-major output
        # is split by (rank, feature) and concatenated rank-major (TorchRec's merge for kernels
        # that make their own output).
        if sparse_features.variable_stride_per_key() and len(self._emb_modules) > 1:
            groups = sparse_features.split(self._feature_splits)
            return self._merge_variable_batch_embeddings(self._forward(groups), self._vbe_splits(groups))
        return super().forward(sparse_features)


class ShardedEmbeddingBagCollection(_TorchrecSharded):
    """TorchRec's ShardedEmbeddingBagCollection over MpeEmbeddingBag kernels (built by
    ``EmbeddingBagCollectionSharder.shard``); see the module docstring for its state dict."""

    def __init__(self, module, table_name_to_parameter_sharding, env, options_of, tiers_of=None, **kwargs):
        object.__setattr__(self, "_mpe_options_of", options_of)
        tiers = {}
        for c in module.embedding_bag_configs():
            t = tiers_of(c.name) if tiers_of is not None else None
            if t is not None:
                tiers[c.name] = dict(t, ids=c.num_embeddings)
        # Each table's row 0 in the whole collection: its physical rows (a tiered table's
        # private + shared rows) follow the tables before it.
        keys, start = {}, 0
        for c in module.embedding_bag_configs():
            keys[c.name] = start
            t = tiers.get(c.name)
            start += c.num_embeddings if t is None else t["private_rows"] + t["shared_rows"]
        object.__setattr__(self, "_mpe_table_keys", keys)
        object.__setattr__(self, "_mpe_tiers", tiers)
        super().__init__(module, table_name_to_parameter_sharding, env, **kwargs)
        self._mpe_rank = dist.get_rank(env.process_group) if env.process_group is not None else 0
        self._mpe_world = env.world_size
        self._register_state_dict_hook(ShardedEmbeddingBagCollection._mpe_state_dict_hook)
        self.register_load_state_dict_post_hook(ShardedEmbeddingBagCollection._mpe_load_post_hook)

    def create_grouped_sharding_infos(self, module, table_name_to_parameter_sharding, prefix, fused_params,
                                      suffix="weight"):
        infos = super().create_grouped_sharding_infos(module, table_name_to_parameter_sharding, prefix,
                                                      fused_params, suffix)
        # The resolved options go into each table's fused_params, so TorchRec groups tables
        # with the same options into one kernel.
        for per_type in infos.values():
            for info in per_type:
                opts = self._mpe_options_of(info.embedding_config.name)
                info.fused_params = {**(info.fused_params or {}), _FUSED_KEY: tuple(sorted(opts.items()))}
        return infos

    def _create_lookups(self):
        for sharding_type, sharding in zip(self._sharding_types, self._embedding_shardings):
            self._lookups.append(
                _MpeLookup(self._mpe_table_keys, self._mpe_tiers, grouped_configs=sharding._grouped_embedding_configs,
                           pg=sharding._pg, device=sharding._device, env=sharding._env,
                           sharding_type=ShardingType(sharding_type)))

    def kernels(self):
        """This rank's MpeEmbeddingBag kernels, in lookup order."""
        out = []
        for lookup in self._lookups:
            out.extend(lookup._emb_modules)
        return out

    def reset_parameters(self):
        if self._device is not None and self._device.type == "meta":
            return
        for k in self.kernels():
            k.reset_parameters()

    def train(self, mode=True):
        super().train(mode)
        for lookup in self._lookups:  # a plain list in TorchRec: not reached by Module.train
            lookup.train(mode)
        return self

    def memory(self):
        """This rank's mpe bytes, summed over its kernels (``TableBatchedEmbeddingBags.memory``),
        with ``tiers_bytes``: the tiered tables' maps (``TieredRows.memory_bytes``, host memory;
        0 when no table is tiered; each column-wise shard keeps its own map and counts it), which
        ``total_bytes`` (the kernels' own) leaves out."""
        total = {}
        for k in self.kernels():
            for name, v in k.tbe.memory().items():
                total[name] = total.get(name, 0) + v
            total["tiers_bytes"] = total.get("tiers_bytes", 0) + sum(m.memory_bytes() for m in k._maps.values())
        return total

    def tiers(self):
        """This rank's maps of tiered tables: table name -> list of ``mpe_torch.TieredRows``,
        one per local shard (a column-wise table's shards on one rank see the same ids, so
        their maps agree)."""
        out = {}
        for k in self.kernels():
            for name, m in k.tiers().items():
                out.setdefault(name, []).append(m)
        return out

    # ---- state dict ----
    def _mpe_plan(self):
        plan = {name: dict(sharding_type=p.sharding_type, compute_kernel=p.compute_kernel, ranks=list(p.ranks or []),
                           shards=[(list(s.shard_offsets), list(s.shard_sizes), str(s.placement))
                                   for s in (p.sharding_spec.shards if p.sharding_spec is not None else [])])
                for name, p in sorted(self.module_sharding_plan.items())}
        for name, t in self._mpe_tiers.items():  # a tiered table's resolved map configuration
            plan[name]["tiers"] = _tier_config(**t)
        return json.dumps(dict(world_size=self._mpe_world, tables=plan), sort_keys=True)

    def _mpe_key(self, i):
        return f"_mpe.rank{self._mpe_rank}.{i}."

    @staticmethod
    def _mpe_state_dict_hook(self, destination, prefix, local_metadata):
        destination[prefix + "_mpe_plan"] = self._mpe_plan()
        kernels = self.kernels()
        for i, k in enumerate(kernels):
            state = k.tbe.state_dict()
            # bytes, not a tensor: its length changes as training allocates (optimizer state,
            # a pending admission), and torch.distributed.checkpoint loads a tensor in place
            # at its current length but a bytes leaf whole.
            destination[prefix + self._mpe_key(i) + "mpe_state"] = state["mpe_state"].numpy().tobytes()
            # The configuration and hyperparameters as JSON text (one leaf: DCP saves it whole).
            destination[prefix + self._mpe_key(i) + "config"] = json.dumps(state["_extra_state"], sort_keys=True)
            for t, m in sorted(k._maps.items()):  # each tiered table's map: MPETIER1 bytes
                destination[prefix + self._mpe_key(i) + f"tiers{t}"] = m.get_extra_state().numpy().tobytes()
        local = {}
        for k in kernels:
            for t, w in zip(k._tables, k.weights()):
                # On the shard's placement (cuda:N for a CUDA kernel; get_weights reads back to it).
                w = w.to(t.local_metadata.placement.device())
                md = self._mpe_physical(t.name, t.local_metadata)
                local.setdefault(t.name, []).append(Shard(tensor=w, metadata=md))
        pg = self._env.process_group
        for c in self._embedding_bag_configs:
            p = self.module_sharding_plan[c.name]
            t = self._mpe_tiers.get(c.name)
            rows = c.num_embeddings if t is None else t["private_rows"] + t["shared_rows"]
            shards = [self._mpe_physical(c.name, s) for s in p.sharding_spec.shards]
            meta = ShardedTensorMetadata(shards_metadata=shards,
                                         size=torch.Size([rows, c.embedding_dim]),
                                         tensor_properties=TensorProperties(dtype=torch.float32))
            destination[f"{prefix}embedding_bags.{c.name}.weight"] = \
                ShardedTensor._init_from_local_shards_and_global_metadata(local.get(c.name, []), meta,
                                                                          process_group=pg)

    def _mpe_physical(self, name, md):
        """A shard's metadata as its kernel stores it: a tiered table's shards hold its
        private + shared rows (row 0 of the table; the plan's columns), not num_embeddings."""
        t = self._mpe_tiers.get(name)
        if t is None:
            return md
        return ShardMetadata(shard_offsets=[0, md.shard_offsets[1]],
                             shard_sizes=[t["private_rows"] + t["shared_rows"], md.shard_sizes[1]],
                             placement=md.placement)

    def _mpe_state_keys(self, prefix):
        keys = [prefix + "_mpe_plan"]
        for i, k in enumerate(self.kernels()):
            keys += [prefix + self._mpe_key(i) + key for key in ("mpe_state", "config")]
            keys += [prefix + self._mpe_key(i) + f"tiers{t}" for t in sorted(k._maps)]
        return keys

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        plan_key = prefix + "_mpe_plan"
        if plan_key not in state_dict:
            missing_keys.extend(k for k in self._mpe_state_keys(prefix) if k not in state_dict)
            return
        theirs, mine = state_dict[plan_key], self._mpe_plan()
        if _plan_placement(theirs) != _plan_placement(mine):
            raise ValueError(f"mpe_torch.torchrec: the state was saved with another sharding plan, world size or "
                             f"tiers; nothing was loaded.\n  state:  {_describe_plan(theirs)}\n  module: "
                             f"{_describe_plan(mine)}")
        kernels = self.kernels()
        wanted = [(prefix + self._mpe_key(i) + "mpe_state", prefix + self._mpe_key(i) + "config")
                  for i in range(len(kernels))]
        tier_keys = [{t: prefix + self._mpe_key(i) + f"tiers{t}" for t in sorted(k._maps)}
                     for i, k in enumerate(kernels)]
        absent = [key for pair in wanted for key in pair if key not in state_dict]
        absent += [f"{key} (table {k._tables[t].name!r}'s map)" for k, per_kernel in zip(kernels, tier_keys)
                   for t, key in per_kernel.items() if key not in state_dict]
        error = None
        if absent:
            error = ValueError(f"mpe_torch.torchrec: rank {self._mpe_rank}'s state lacks {', '.join(absent)}; "
                               "nothing was loaded")
        # Kernels [0, touched) may have changed: a failure restores them from these backups.
        backups, touched = [(k.tbe.state_dict(), {t: m.get_extra_state() for t, m in k._maps.items()})
                            for k in kernels], 0
        if error is None:
            try:
                for k, (state_key, config_key), per_kernel in zip(kernels, wanted, tier_keys):
                    touched += 1
                    for t, key in per_kernel.items():
                        raw = state_dict[key]
                        if not isinstance(raw, (bytes, bytearray)):
                            raise ValueError(f"mpe_torch.torchrec: {key} must be the bytes mpe_torch writes, got "
                                             f"{type(raw).__name__}")
                        try:  # MPETIER1 verified whole (size, CRC-32C, configuration, rows) before it replaces
                            k._maps[t].set_extra_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
                        except _mpe.CheckpointError as e:
                            raise _mpe.CheckpointError(f"mpe_torch.torchrec: {key} (table {k._tables[t].name!r}'s "
                                                       f"map): {e}") from None
                    try:
                        extra = json.loads(state_dict[config_key])
                    except (TypeError, ValueError):
                        raise ValueError(f"mpe_torch.torchrec: {config_key} is not the JSON text mpe_torch writes") \
                            from None
                    raw = state_dict[state_key]
                    if not isinstance(raw, (bytes, bytearray)):
                        raise ValueError(f"mpe_torch.torchrec: {state_key} must be the bytes mpe_torch writes, got "
                                         f"{type(raw).__name__}")
                    k.tbe.load_state_dict({"mpe_state": torch.frombuffer(bytearray(raw), dtype=torch.uint8),
                                           "_extra_state": extra})
                    k.fused_optimizer.param_groups[0]["lr"] = k.tbe.get_learning_rate()
            except Exception as e:  # restore below, then raise on every rank
                error = e
        # NCCL reduces CUDA tensors only; gloo takes either.
        flag_device = self._device if self._device is not None and self._device.type == "cuda" else "cpu"
        failed = torch.tensor([0 if error is None else 1], dtype=torch.int64, device=flag_device)
        pg = self._env.process_group
        if pg is not None and dist.get_world_size(pg) > 1:
            dist.all_reduce(failed, op=dist.ReduceOp.MAX, group=pg)
        if int(failed.item()) != 0:
            for k, (backup, map_backups) in list(zip(kernels, backups))[:touched]:
                k.tbe.load_state_dict(backup)
                for t, b in map_backups.items():
                    k._maps[t].set_extra_state(b)
                k.fused_optimizer.param_groups[0]["lr"] = k.tbe.get_learning_rate()
            if error is None:
                raise RuntimeError("mpe_torch.torchrec: another rank could not load its state; nothing was loaded "
                                   "on any rank")
            raise error

    @staticmethod
    def _mpe_load_post_hook(self, incompatible_keys):
        # This module's weight entries are a read-only view and its mpe entries were consumed
        # by _load_from_state_dict.
        weights = tuple(f"embedding_bags.{name}.weight" for name in self._table_names)
        incompatible_keys.unexpected_keys[:] = [
            k for k in incompatible_keys.unexpected_keys
            if not (k.endswith(weights) or "_mpe.rank" in k or k.endswith("_mpe_plan"))]


def _plan_placement(text):
    """The plan ``text`` (``_mpe_plan``'s JSON) with each shard's placement as its rank only, so
    a state saved on CUDA devices loads into the CPU model of the same plan and back; text that
    is not such a plan is returned as it is (and then differs)."""
    try:
        p = json.loads(text)
        for v in p["tables"].values():
            v["shards"] = [[o, s, str(where).split("/")[0]] for o, s, where in v["shards"]]
        return json.dumps(p, sort_keys=True)
    except (TypeError, ValueError, KeyError, AttributeError):
        return text


def _describe_tiers(t):
    if t is None:
        return ""
    return (f" tiered ({t['private_rows']} private + {t['shared_rows']} shared rows of {t['ids']} ids, "
            f"promote_at {t['promote_at']}, demote_below {t['demote_below']}, decay_every {t['decay_every']}, "
            f"sketch_width {t['sketch_width']}, seed {t['seed']})")


def _describe_plan(text):
    try:
        p = json.loads(text)
        tables = ", ".join(f"{n}: {v['sharding_type']} on ranks {v['ranks']}" + _describe_tiers(v.get("tiers"))
                           for n, v in p["tables"].items())
        return f"world size {p['world_size']}; {tables}"
    except (TypeError, ValueError, KeyError):
        return repr(text)[:200]


class EmbeddingBagCollectionSharder(_TorchrecSharder):
    """Shards ``torchrec.EmbeddingBagCollection`` onto mpe kernels.

    Args:
        fused_params: ``TableBatchedEmbeddingBags`` keyword arguments for every table
            (``OPTION_NAMES``: storage, cache, cache_fraction, rounding, optimizer,
            learning_rate, eps, beta1, beta2, seed, state_precision, non_finite, slot_index,
            defer_admission, store_placement, max_range_growth). ``seed`` must be the same on
            every rank.
        table_options: table name -> overrides of ``fused_params`` for that table (so one
            model mixes, say, an INT4 table with a 1 % cache and an FP16 one), and ``tiers``:
            the table's frequency tiers (a dict of ``TIER_FIELDS``; module docstring). Tables
            with the same resolved options share a kernel (and its cache), tiered or not.

    Raises:
        TypeError: an options argument (or ``tiers``) that is not a dict; a ``tiers`` field
            that is not an integer.
        ValueError: an unknown option or ``tiers`` field (the message lists the valid ones),
            ``tiers`` without private_rows or shared_rows, or in ``fused_params``. Option values
            are checked here by building a tiny kernel (``TableBatchedEmbeddingBags``' errors);
            ``tiers`` sizes against the table's ids when DMP shards.
    """

    def __init__(self, fused_params=None, table_options=None, qcomm_codecs_registry=None):
        defaults = _check_options(fused_params, "fused_params")
        if "tiers" in defaults and defaults["tiers"] is None:
            del defaults["tiers"]  # None: no tiers, as in table_options
        if defaults.get("tiers") is not None:
            raise ValueError("mpe_torch.torchrec: fused_params sets tiers; tiers are sized per table (their rows "
                             "within its ids): set them in table_options[<table>]['tiers']")
        if table_options is not None and not isinstance(table_options, dict):
            raise TypeError("mpe_torch.torchrec: table_options must map table names to option dicts")
        per_table = {str(n): _check_options(o, f"table_options[{n!r}]") for n, o in (table_options or {}).items()}
        tiers = {n: _check_tiers(o.pop("tiers"), f"table_options[{n!r}]['tiers']") for n, o in per_table.items()
                 if "tiers" in o}
        tiers = {n: t for n, t in tiers.items() if t is not None}
        super().__init__(fused_params=None, qcomm_codecs_registry=qcomm_codecs_registry)
        self._mpe_defaults, self._mpe_table_options, self._mpe_tiers = defaults, per_table, tiers
        _validate(self.options(None), "fused_params")
        for name in per_table:
            _validate(self.options(name), f"table_options[{name!r}] (with fused_params)")

    def options(self, table_name):
        """The resolved TableBatchedEmbeddingBags options of table ``table_name``: fused_params,
        then its table_options (a table that sets ``cache="none"`` drops an inherited
        ``cache_fraction``)."""
        own = self._mpe_table_options.get(table_name, {})
        resolved = {**self._mpe_defaults, **own}
        if own.get("cache") == "none" and "cache_fraction" not in own:
            resolved.pop("cache_fraction", None)
        return resolved

    def tiers(self, table_name):
        """Table ``table_name``'s ``tiers`` (a dict of TIER_FIELDS as given), or None when the
        table is not tiered."""
        t = self._mpe_tiers.get(table_name)
        return None if t is None else dict(t)

    def sharding_types(self, compute_device_type):
        """``SHARDING_TYPES`` for a ``cpu`` or ``cuda`` compute device; ValueError naming any
        other device type."""
        _device_kind(compute_device_type, "compute_device_type")
        return list(SHARDING_TYPES)

    def compute_kernels(self, sharding_type, compute_device_type):
        """``[MPE_KERNEL]`` for a sharding type of ``SHARDING_TYPES`` on ``cpu`` or ``cuda``
        ([] for another sharding type); ValueError naming any other device type."""
        _device_kind(compute_device_type, "compute_device_type")
        return [MPE_KERNEL] if sharding_type in SHARDING_TYPES else []

    def shard(self, module, params, env, device=None, module_fqn=None):
        names = [c.name for c in module.embedding_bag_configs()]
        unknown = sorted(set(self._mpe_table_options) - set(names))
        if unknown:
            raise ValueError(f"mpe_torch.torchrec: table_options names table(s) {unknown} that the "
                             f"EmbeddingBagCollection does not have (its tables: {names})")
        device = None if device is None else torch.device(device)
        if device is not None and device.type not in ("cpu", "meta", "cuda"):
            raise ValueError(f"mpe_torch.torchrec: DMP asked for device {device}; mpe's kernels run on "
                             f"{' or '.join(COMPUTE_DEVICES)} devices only")
        for name in names:
            # The plan's placements and DMP's device must name one device type: mpe builds its
            # kernels on DMP's device, so a CUDA plan on a CPU DMP (or the reverse) would train
            # where the plan does not say.
            p = params.get(name)
            for s in (p.sharding_spec.shards if p is not None and p.sharding_spec is not None else []):
                placed = s.placement.device() if s.placement is not None else None
                if placed is not None and device is not None and device.type != "meta" and placed.type != device.type:
                    raise ValueError(f"mpe_torch.torchrec: the plan places table {name!r} on {placed}, but DMP's device "
                                     f"is {device}; make the plan for DMP's device (planner(compute_device="
                                     f"'{device.type}'), sharding_plan(..., compute_device='{device.type}'))")
        if device is not None and device.type == "cuda":
            why = _mpe._cuda_unavailable()
            if why is not None:
                raise RuntimeError(f"mpe_torch.torchrec: DMP's device is {device}, but {why}; shard onto the CPU "
                                   "instead (DMP device=torch.device('cpu'), a plan made with compute_device='cpu')")
        for name in names:
            p = params.get(name)
            if p is None:
                raise ValueError(f"mpe_torch.torchrec: the plan has no sharding for table {name!r}")
            if p.compute_kernel != MPE_KERNEL or p.sharding_type not in SHARDING_TYPES:
                raise ValueError(f"mpe_torch.torchrec: table {name!r} is planned as {p.sharding_type}/"
                                 f"{p.compute_kernel}; mpe's sharder runs {'/'.join(SHARDING_TYPES)} with "
                                 f"compute kernel '{MPE_KERNEL}'")
            for s in (p.sharding_spec.shards if p.sharding_spec is not None else []):
                if s.shard_offsets[1] % 4:
                    raise ValueError(f"mpe_torch.torchrec: table {name!r} has a column-wise shard starting at column "
                                     f"{s.shard_offsets[1]}; mpe's shards start at multiples of 4 columns (their "
                                     "rounding streams line up with the whole table's): choose shard widths that are "
                                     "multiples of 4")
        configs = module.embedding_bag_configs()
        for c in configs:
            if c.name in self._mpe_tiers:
                # Every rank checks every tiered table's sizes against its ids before any
                # kernel is built.
                _check_tiers(self._mpe_tiers[c.name], f"table_options[{c.name!r}]['tiers']", c.num_embeddings)
        if any(c.pooling not in (PoolingType.SUM, PoolingType.MEAN) for c in configs):
            raise ValueError("mpe_torch.torchrec: only SUM and MEAN pooling are supported")
        mean = [c.name for c in configs if c.pooling == PoolingType.MEAN]
        if module.is_weighted() and mean:
            raise ValueError(f"mpe_torch.torchrec: the EmbeddingBagCollection is weighted and table(s) {mean} pool by "
                             "MEAN; mpe takes per-sample weights with SUM pooling only")
        if device is not None and device.type == "cuda":
            # The CUDA module builds fewer combinations: every table's options are checked on
            # every rank alike before any kernel is built.
            for name in names:
                _validate(self.options(name), f"table {name!r} on {device}", device)
        return ShardedEmbeddingBagCollection(module, params, env, self.options, self.tiers,
                                             fused_params=self.fused_params,
                                             device=device, qcomm_codecs_registry=self.qcomm_codecs_registry,
                                             module_fqn=module_fqn)


def table_wise(rank):
    """TorchRec's ``table_wise(rank)`` plan entry with mpe's compute kernel."""
    from torchrec.distributed import sharding_plan as sp
    return sp.table_wise(rank=rank, compute_kernel=MPE_KERNEL)


def column_wise(ranks=None, size_per_rank=None):
    """TorchRec's ``column_wise(ranks=..., size_per_rank=...)`` plan entry with mpe's compute
    kernel; each shard's width must be a multiple of 4 (its columns' rounding streams line up
    with the unsharded table's)."""
    from torchrec.distributed import sharding_plan as sp
    if (ranks is not None and len(ranks) == 0) or (size_per_rank is not None and len(size_per_rank) == 0):
        raise ValueError("mpe_torch.torchrec: column_wise needs at least one rank (ranks or size_per_rank)")
    return sp.column_wise(ranks=ranks, size_per_rank=size_per_rank, compute_kernel=MPE_KERNEL)


def sharding_plan(module, per_table, sharder, world_size, path="", compute_device="cpu", local_size=None):
    """A ``ShardingPlan`` placing ``module`` (an EmbeddingBagCollection at ``path`` in the
    model, "" for the model itself) as ``per_table`` says (table name -> ``table_wise(r)`` or
    ``column_wise([...])`` of this module), for ``world_size`` processes on ``compute_device``
    (``"cpu"``, or ``"cuda"``: rank r's shards placed on ``cuda:(r % local_size)``;
    ``local_size``: processes per host, default ``world_size``)."""
    _device_kind(compute_device, "compute_device")
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan
    from torchrec.distributed.types import ShardingPlan
    names = [c.name for c in module.embedding_bag_configs()]
    missing = [n for n in names if n not in per_table]
    if missing:
        raise ValueError(f"mpe_torch.torchrec: sharding_plan has no entry for table(s) {missing}")
    local_size = world_size if local_size is None else int(local_size)
    plan = construct_module_sharding_plan(module, per_table, sharder=sharder, local_size=local_size,
                                          world_size=world_size, device_type=compute_device)
    for name, p in plan.items():
        bad = [r for r in (p.ranks or []) if not 0 <= r < world_size]
        if bad:
            raise ValueError(f"mpe_torch.torchrec: table {name!r} is placed on rank(s) {bad}; world_size = {world_size}")
    return ShardingPlan({path: plan})


# Options that change no byte of the footprint (planned_memory takes the rest).
# (store_placement moves the store between memories, not its size: shard_storage.)
_NOT_MEMORY = ("learning_rate", "eps", "beta1", "beta2", "seed", "non_finite", "defer_admission", "store_placement",
               "max_range_growth")


def _planned(rows, dim, options, column_key):
    from . import planned_memory
    kw = {k: v for k, v in options.items() if k not in _NOT_MEMORY}
    # A kernel always keys its rows (row_keys: 8 bytes of metadata a table).
    return planned_memory([(rows, dim)], row_keys=[0], column_keys=[column_key] if column_key else None, **kw)


def shard_bytes(rows, dim, options, column_key=0, tiers=None):
    """mpe's bytes for one table shard of ``(rows, dim)`` held alone by a kernel with these
    resolved options: store + cache + metadata + optimizer state, as the built module's
    ``memory()`` reports them after its first step (``mpe_torch.planned_memory``; nothing is
    allocated). Tables sharing a kernel share one cache, sized from their rows together.
    ``tiers``: as ``shard_storage``'s (the shard's ``private_rows + shared_rows`` rows and its
    map's bytes)."""
    return sum(shard_storage(rows, dim, options, column_key, "cpu", tiers))


def shard_storage(rows, dim, options, column_key=0, compute_device="cpu", tiers=None):
    """``shard_bytes`` split by memory: ``(hbm, ddr)`` bytes of the shard's kernel on
    ``compute_device``. ``"cpu"``: ``(0, shard_bytes)``. ``"cuda"``: cache, optimizer state and
    metadata in HBM; the store in HBM with ``store_placement`` ``"device"`` (the default), in
    host memory (DDR) with ``"host_mapped"`` or ``"managed"`` (mpe's CudaBackend placements).
    ``tiers``: the table's ``tiers`` option (``EmbeddingBagCollectionSharder.tiers``, or a
    ``TieredRows.config`` whose ids are ``rows``): the shard then holds ``private_rows +
    shared_rows`` rows, not ``rows``, plus its map's host bytes (``TieredRows.memory_bytes``) in
    DDR on either device. Raises ValueError for another compute device, and for ``tiers`` what
    the sharder raises (TypeError / ValueError naming the field and its value, or P + S > rows)."""
    _device_kind(compute_device, "compute_device")
    map_bytes = 0
    if tiers is not None:
        tiers = _check_tiers(tiers, "shard_storage: tiers", _integer(rows, "rows", "an integer"))
        rows = tiers["private_rows"] + tiers["shared_rows"]
        map_bytes = _planned_tier_bytes(**tiers)
    m = _planned(rows, dim, options, column_key)
    rest = m["cache_bytes"] + m["metadata_bytes"] + m["optimizer_bytes"]
    if compute_device == "cpu":
        return 0, m["store_bytes"] + rest + map_bytes
    if options.get("store_placement", "device") == "device":
        return m["store_bytes"] + rest, map_bytes
    return rest, m["store_bytes"] + map_bytes


def planner(world_size, sharder=None, constraints=None, batch_size=None, ddr_bytes_per_rank=None,
            compute_device="cpu", hbm_bytes_per_rank=None, local_world_size=None):
    """TorchRec's ``EmbeddingShardingPlanner`` for ``world_size`` processes on
    ``compute_device`` (``"cpu"`` or ``"cuda"``: one GPU a process) whose storage estimate of a
    shard on mpe's kernel is mpe's own bytes (``shard_storage``: a 4x smaller INT8 row, the
    cache, the optimizer state; on ``cuda`` the store in HBM or, with ``store_placement``
    ``"host_mapped"``/``"managed"``, in DDR) plus TorchRec's input/output buffers (DDR on the
    CPU, HBM on CUDA), so the planner fits as many tables as mpe's memory allows. Its
    performance estimate is TorchRec's for its fused kernel on the same shard (on CUDA with a
    host store: its UVM kernel, UVM-caching with mpe's ``cache_fraction`` as the load factor
    when the table has a cache). ``ddr_bytes_per_rank`` and ``hbm_bytes_per_rank`` set each
    rank's capacities (TorchRec's defaults otherwise); ``constraints`` are TorchRec's
    ``ParameterConstraints`` by table name; ``local_world_size``: processes per host (TorchRec's
    default: ``world_size``). The planner needs no GPU. ValueError for another compute device."""
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.constants import BATCH_SIZE
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    _device_kind(compute_device, "compute_device")
    batch_size = BATCH_SIZE if batch_size is None else batch_size
    kw = dict(world_size=world_size, compute_device=compute_device)
    if ddr_bytes_per_rank is not None:
        kw["ddr_cap"] = int(ddr_bytes_per_rank)
    if hbm_bytes_per_rank is not None:
        kw["hbm_cap"] = int(hbm_bytes_per_rank)
    if local_world_size is not None:
        kw["local_world_size"] = int(local_world_size)
    topology = Topology(**kw)
    sharder = sharder if sharder is not None else EmbeddingBagCollectionSharder()
    estimators = [_PerfEstimator(topology, constraints, sharder),
                  _StorageEstimator(topology, constraints, sharder)]
    enumerator = EmbeddingEnumerator(topology=topology, batch_size=batch_size, constraints=constraints,
                                     estimator=estimators)
    return EmbeddingShardingPlanner(topology=topology, batch_size=batch_size, enumerator=enumerator,
                                    constraints=constraints)


class _AsFused:
    """Presents mpe's sharding options as TorchRec's fused kernel to TorchRec's estimators (on
    CUDA, a table whose store is in host memory as its UVM kernel, UVM-caching with mpe's
    cache_fraction as load factor when it has a cache, for the performance estimate)."""

    def __init__(self, options, sharder=None, compute_device="cpu"):
        self.options = [o for o in options if o.compute_kernel == MPE_KERNEL]
        self._sharder, self._device = sharder, compute_device
        self._cache_params = []

    def _kernel(self, o):
        if self._sharder is None or self._device != "cuda":
            return EmbeddingComputeKernel.FUSED.value, None
        opts = self._sharder.options(o.name)
        if opts.get("store_placement", "device") == "device":
            return EmbeddingComputeKernel.FUSED.value, None
        fraction = float(opts.get("cache_fraction", 0.0)) if opts.get("cache", "none") != "none" else 0.0
        if fraction > 0:
            return EmbeddingComputeKernel.FUSED_UVM_CACHING.value, fraction
        return EmbeddingComputeKernel.FUSED_UVM.value, None

    def __enter__(self):
        from torchrec.distributed.types import CacheParams
        for o in self.options:
            kernel, fraction = self._kernel(o)
            self._cache_params.append(o.cache_params)
            if fraction is not None and o.cache_params is None:
                o.cache_params = CacheParams(load_factor=fraction)
            o.compute_kernel = kernel
        return self

    def __exit__(self, *exc):
        for o, params in zip(self.options, self._cache_params):
            o.compute_kernel = MPE_KERNEL
            o.cache_params = params


class _PerfEstimator:
    def __init__(self, topology, constraints, sharder=None):
        from torchrec.distributed.planner.shard_estimators import EmbeddingPerfEstimator
        self._inner = EmbeddingPerfEstimator(topology=topology, constraints=constraints)
        self._sharder, self._device = sharder, topology.compute_device

    def estimate(self, sharding_options, sharder_data_map=None):
        with _AsFused(sharding_options, self._sharder, self._device):
            self._inner.estimate(sharding_options, sharder_data_map)


class _StorageEstimator:
    def __init__(self, topology, constraints, sharder):
        from torchrec.distributed.planner.shard_estimators import EmbeddingStorageEstimator
        self._inner = EmbeddingStorageEstimator(topology=topology, constraints=constraints)
        self._sharder, self._device = sharder, topology.compute_device

    def estimate(self, sharding_options, sharder_data_map=None):
        from torchrec.distributed.planner.types import Storage
        with _AsFused(sharding_options) as mine:  # TorchRec's FUSED estimate: its FP32 slice + I/O
            self._inner.estimate(sharding_options, sharder_data_map)
        for o in mine.options:
            opts = self._sharder.options(o.name)
            rows, dim = o.tensor.shape
            fp32 = 4 * rows * dim
            for shard in o.shards:
                srows, scols = shard.size
                # TorchRec's estimate is its FP32 tensor slice + its input/output buffers (DDR on
                # the CPU, HBM on CUDA); mpe's bytes replace the tensor slice.
                tensor_part = -(-fp32 * srows * scols // (rows * dim))
                hbm, ddr = shard_storage(srows, scols, opts, shard.offset[1], self._device,
                                         self._sharder.tiers(o.name))
                if self._device == "cuda":
                    io = shard.storage.hbm - tensor_part
                    shard.storage = Storage(hbm=io + hbm, ddr=shard.storage.ddr + ddr)
                else:
                    io = shard.storage.ddr - tensor_part
                    shard.storage = Storage(hbm=shard.storage.hbm + hbm, ddr=io + ddr)
