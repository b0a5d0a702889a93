# SPDX-License-Identifier: Apache-2.0
"""mpe_torch.TieredRows: mpe's frequency-tiered id -> row map (mpe::TieredRows) for one table."""

import torch
from torch import nn

from . import _C
from ._args import _integer


class TieredRows(nn.Module):
    r"""Frequency-tiered id -> physical-row map in front of one table (mpe's ``TieredRows``,
    the CAFE scheme, SIGMOD 2024): hot ids own one of ``private_rows`` rows, cold ids share
    ``shared_rows`` rows by hashing, so a table of ``ids`` logical ids needs only
    ``physical_rows = private_rows + shared_rows`` rows.

    Give a ``TableBatchedEmbeddingBags`` table ``physical_rows`` rows, and before each training
    batch map its ids and copy the promoted rows (each ``map``'s moves are copied once)::

        tiers = mpe_torch.TieredRows(ids=10_000_000, private_rows=200_000, shared_rows=800_000)
        emb = mpe_torch.TableBatchedEmbeddingBags([(tiers.physical_rows, 64)], storage="int4", ...)
        rows = tiers(indices)                 # training: counts, promotes, decays; eval / no_grad: lookup
        tiers.copy_moved_rows(emb, table=0)   # each promoted id starts from its shared row's weights
        out = emb(rows, offsets)

    The rules (count-min sketch of 4 x ``sketch_width`` u8 counters; a cold id whose estimate
    reaches ``promote_at`` takes the lowest free private row; every ``decay_every`` counted
    lookups the counts halve and hot ids below ``demote_below`` give their row back) are mpe's,
    exactly: docs/architecture.md "Frequency tiers" and include/mpe/embedding/tiered_rows.hpp.
    The same configuration and sequence of batches give the same rows, moves and state on every
    machine. The map is host code: ids on a CUDA device are copied to the host and the rows
    back (the call waits for the ids). ``copy.copy`` gives a second module sharing the same
    map; ``copy.deepcopy`` raises TypeError and pickling fails (copy the state with ``state_dict()``).

    Args:
        ids: logical ids of the table, ids in [0, ids). >= 1.
        private_rows: P, physical rows [0, P) for hot ids (0: a pure hashed table).
        shared_rows: S >= 1, physical rows [P, P + S): a cold id uses P + mix64(id ^ seed) mod S.
        promote_at: the sketch estimate that promotes, in [1, 255]. Default 4.
        demote_below: a hot id whose count after a decay is below it is demoted, <= promote_at
            (0: never). Default 2.
        decay_every: counted lookups (unique ids per training call) between decays; 0: 10 *
            max(P, 16).
        sketch_width: W, a power of two; 0: the smallest one >= max(64, P).
        seed: the hash's and the sketch's seed, in [0, 2**64).

    Memory: ``memory_bytes()`` = 4 W + 12 P + 4 C host bytes (C the hot-id index's capacity,
    the smallest power of two >= 2 P), besides the table's rows.

    State: ``state_dict()`` holds the exact state as mpe's MPETIER1 bytes (``_extra_state``, a
    uint8 tensor); ``load_state_dict`` verifies all of it (size, CRC-32C, the configuration,
    every row and id) and only then replaces the map, else raises ``mpe_torch.CheckpointError``
    naming what is wrong and changes nothing.

    Raises:
        ValueError: a configuration field out of its range, named with its value.
        TypeError: a field that is not an integer.
    """

    def __init__(self, ids, private_rows, shared_rows, promote_at=4, demote_below=2, decay_every=0,
                 sketch_width=0, seed=0):
        super().__init__()
        self._map = _C.TieredRows(**_config_args(ids, private_rows, shared_rows, promote_at, demote_below,
                                                 decay_every, sketch_width, seed))
        self._moves_copied = True  # no map() yet: nothing to copy

    # ---- the map ----
    def forward(self, ids):
        """``map(ids)`` in training mode with gradients enabled; ``lookup(ids)`` in eval mode or
        under ``torch.no_grad()`` / ``torch.inference_mode()`` (as TableBatchedEmbeddingBags
        treats a forward there: an evaluation changes nothing)."""
        return self.map(ids) if self.training and torch.is_grad_enabled() else self.lookup(ids)

    def map(self, ids):
        """Training lookup: counts the batch, promotes and decays, then maps. ``ids``: int64
        tensor of any shape (CSR indices: repeats allowed), on any device. Returns the physical
        rows, int64, same shape and device. ``last_moves()`` then holds this call's promotions.
        Raises IndexError naming ``ids[i]`` and its value for an id outside [0, ids), TypeError
        for a tensor that is not int64; nothing changes then."""
        host = self._host_ids(ids, "map")
        rows = self._map.map(host.reshape(-1)).reshape(ids.shape).to(ids.device)
        self._moves_copied = False
        return rows

    def lookup(self, ids):
        """Read-only lookup (evaluation): the rows ``map`` would give from the current state,
        counting, promoting and decaying nothing. Shapes and errors as ``map``."""
        host = self._host_ids(ids, "lookup")
        return self._map.lookup(host.reshape(-1)).reshape(ids.shape).to(ids.device)

    def row_of(self, id):
        """The physical row of one id now (as ``lookup``). IndexError outside [0, ids)."""
        id = _integer(id, "id", "an integer")
        if not 0 <= id < self.config["ids"]:
            raise IndexError(f"mpe_torch.TieredRows.row_of: id = {id} is outside [0, {self.config['ids']})")
        return self._map.row_of(id)

    def last_moves(self):
        """The last ``map`` call's promotions, ascending id: a ``(k, 3)`` int64 CPU tensor of
        rows ``(id, from_row, to_row)`` (its shared row, its new private row)."""
        return self._map.last_moves()

    def copy_moved_rows(self, module, table):
        """Copies each of ``last_moves()``' shared rows onto its private row in ``table`` of
        ``module`` (a ``TableBatchedEmbeddingBags`` whose table has ``physical_rows`` rows):
        weights only (the private row keeps its optimizer state; a row read from the FP32
        cache is quantized into the store's format). Call after ``map`` and before the batch's
        forward. Each ``map``'s moves are copied once: a later call before the next ``map``
        (after an evaluation, a refused ``map`` or a second call) copies nothing and returns
        False, so it never overwrites rows trained since. Returns True when it copied.
        Synchronous. Raises TypeError for a module that is not a TableBatchedEmbeddingBags or
        a table that is not an integer, IndexError for a table outside the module, ValueError
        when the table's row count is not ``physical_rows``; nothing is copied then."""
        from . import TableBatchedEmbeddingBags
        if not isinstance(module, TableBatchedEmbeddingBags):
            raise TypeError("mpe_torch.TieredRows.copy_moved_rows: module must be a TableBatchedEmbeddingBags, got "
                            f"{type(module).__name__}")
        table = _integer(table, "table", "an integer table number")
        specs = module.specs
        if not 0 <= table < len(specs):
            raise IndexError(f"mpe_torch.TieredRows.copy_moved_rows: table = {table} is outside [0, {len(specs)})")
        if specs[table][0] != self.physical_rows:
            raise ValueError(f"mpe_torch.TieredRows.copy_moved_rows: table {table} has {specs[table][0]} rows; this "
                             f"map needs physical_rows = {self.physical_rows}")
        if self._moves_copied:
            return False
        moves = self.last_moves()
        if moves.shape[0]:
            module.copy_rows(table, moves[:, 1].contiguous(), moves[:, 2].contiguous())
        self._moves_copied = True
        return True

    # ---- facts ----
    @property
    def physical_rows(self):
        """P + S: the rows the table must have."""
        return self._map.physical_rows

    @property
    def hot_ids(self):
        """Ids holding a private row now, in [0, P]."""
        return self._map.hot_ids

    @property
    def config(self):
        """The configuration, ``decay_every`` and ``sketch_width`` resolved (dict)."""
        return self._map.config()

    def stats(self):
        """Counters of ``map`` since construction or ``reset_stats()``, or the saved counters
        a load restored (dict: lookups (id occurrences), private_lookups, shared_lookups,
        promotions, demotions, decays, refused_promotions)."""
        return self._map.stats()

    def reset_stats(self):
        """Zeroes ``stats()``; the map, sketch and decay clock are unchanged."""
        self._map.reset_stats()

    def memory_bytes(self):
        """Host bytes of the tiering metadata (see the class)."""
        return self._map.memory_bytes()

    # ---- state ----
    def get_extra_state(self):
        return self._map.save_bytes()

    def set_extra_state(self, state):
        if not (torch.is_tensor(state) and state.dtype == torch.uint8 and state.dim() == 1):
            raise ValueError("mpe_torch.TieredRows: _extra_state must be a 1-D uint8 tensor of MPETIER1 bytes, "
                             f"got {type(state).__name__}")
        self._map.load_bytes(state.cpu().contiguous())
        self._moves_copied = True  # a load empties last_moves()

    def __deepcopy__(self, memo):
        raise TypeError("mpe_torch: a TieredRows cannot be deep-copied (its map is mpe's C++ object); save "
                        "state_dict() and load it into a TieredRows built with the same configuration")

    def extra_repr(self):
        c = self.config
        return (f"ids={c['ids']}, private_rows={c['private_rows']}, shared_rows={c['shared_rows']}, "
                f"promote_at={c['promote_at']}, demote_below={c['demote_below']}, "
                f"decay_every={c['decay_every']}, sketch_width={c['sketch_width']}, seed={c['seed']}")

    def _host_ids(self, ids, fn):
        if not torch.is_tensor(ids):
            raise TypeError(f"mpe_torch.TieredRows.{fn}: ids must be a torch.int64 tensor, got {type(ids).__name__}")
        if ids.dtype != torch.int64:
            raise TypeError(f"mpe_torch.TieredRows.{fn}: ids must have dtype torch.int64, got {ids.dtype}")
        return ids.detach().to("cpu").contiguous()


def _config_args(ids, private_rows, shared_rows, promote_at=4, demote_below=2, decay_every=0, sketch_width=0,
                 seed=0):
    """The constructor's arguments as _C.TieredRows takes them: integers (TypeError otherwise),
    each within its C++ type (ValueError naming it); mpe checks the ranges."""
    args = dict(ids=ids, private_rows=private_rows, shared_rows=shared_rows, promote_at=promote_at,
                demote_below=demote_below, decay_every=decay_every, sketch_width=sketch_width, seed=seed)
    args = {k: _integer(v, k, "an integer") for k, v in args.items()}
    if not 0 <= args["seed"] < 2**64:
        raise ValueError(f"mpe_torch.TieredRows: seed = {args['seed']} is outside [0, 2**64)")
    for k in ("ids", "private_rows", "shared_rows", "decay_every", "sketch_width"):
        if not -2**63 <= args[k] < 2**63:
            raise ValueError(f"mpe_torch.TieredRows: {k} = {args[k]} is outside int64")
    return args


def _tier_config(**fields):
    """``TieredRows(**fields).config`` without building the map (mpe's ``TieredRows::resolve``:
    a planner sizes 10^9-id tables). Raises as the constructor."""
    return _C.TieredRows.resolve(**_config_args(**fields))


def _planned_tier_bytes(**fields):
    """``TieredRows(**fields).memory_bytes()`` without building the map (mpe's
    ``TieredRows::planned_memory_bytes``: 4 W + 12 P + 4 C host bytes). Raises as the
    constructor."""
    return _C.TieredRows.planned_memory_bytes(**_config_args(**fields))
