// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/host/phase_mark.hpp
/// @brief `MPE_PHASE_MARK(name)`: a profiling hook at the host-side boundaries of
/// CachedEmbedding's forward() and populate (not public API; for benchmarks and profilers).
///
/// By default it expands to nothing. A program may define `MPE_PHASE_MARK(name)` before it
/// includes any mpe header, e.g. to push an NVTX marker or read a clock (a benchmark harness
/// can time each phase this way). Every translation unit of the program must
/// see the same definition (mpe's templates are inline: one definition rule). `name` is a
/// string literal, the phase that has just ended, in call order:
///
/// | mark | what ran since the previous mark |
/// |---|---|
/// | `"begin"` | nothing: forward() was entered |
/// | `"validate"` | shape checks, index/offset validation and the expansion to global rows |
/// | `"dedup"` | populate: the batch's unique rows (BitmapUnique, else a stable sort) |
/// | `"sort"` | populate: observation, admission keys, their sort by set, rows in order (AdmitRows) |
/// | `"hits"` | populate: AdmitSet's Hits launch (lookups); empty on one host thread (*) |
/// | `"misses"` | populate: AdmitSet's Misses launch (victims, write-backs, fills) (*) |
/// | `"count"` | populate: outcome tallies, counters and the policy's decay |
/// | `"slots"` | forward: each occurrence's cache slot |
/// | `"pool"` | forward: pooling (PoolBags) |
/// | `"end"` | forward: what backward() needs kept; forward() returns |
///
/// (*) On one host thread (built-in policies: detail::set_local_policy) the hits run inside
/// the misses pass (AdmitSet::run_fused), so `"misses"` ends both and `"hits"` ends an empty
/// phase.
///
/// populate's marks also fire inside prefetch(), where `"dedup"` also holds whatever ran
/// since the previous mark (prefetch's validation); a forward() that consumes a prefetched
/// batch fires none of them, and neither does a table without a cache (no populate). The
/// mark runs on the calling host thread once the phase's launches are queued: with the host
/// backend they have run; with an asynchronous backend (CUDA) they may still be running.
/// Adds no work when undefined.
#pragma once

#ifndef MPE_PHASE_MARK
#define MPE_PHASE_MARK(name) static_cast<void>(0)
#endif
