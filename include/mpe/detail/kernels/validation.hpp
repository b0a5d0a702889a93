// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/validation.hpp
/// @brief Input checks of CachedEmbedding as per-item code (not public): every check of
/// one call writes into one `CallRecord` in backend memory, so the host learns the
/// verdict of a whole call with a single read (Validation::Synchronous) or not at all
/// (Validation::Deferred: `Seal*` files the first failure in a `DeferredError` and gates
/// the call's updates on the device).
#pragma once

#include <cstdint>
#include <string>

#include "mpe/numeric/atomics.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"

namespace mpe::detail {

inline constexpr index_t kNoError = INT64_MAX;

/// The checks of one call, in the order their failures are reported (the first failing
/// one names the error).
enum Check : std::int32_t {
  kOffsetsFirst,  ///< offsets[0] != 0                       v = {offsets[0]}
  kOffsetsLast,   ///< offsets[T*B] != indices.size()        v = {offsets[T*B], indices.size()}
  kOffsetsOrder,  ///< offsets[j] > offsets[j+1], smallest j v = {offsets[j], offsets[j+1]}
  kWeights,       ///< non-finite per-sample weight          v = {float bits}
  kIndex,         ///< index outside its table               v = {index, bag, table}
  kMismatch,      ///< forward() batch != pending prefetch   pos < n: indices, else offsets - n; v = {n}
  kGrad,          ///< non-finite grad_output element        v = {float bits}
  kOverflow,      ///< backward: a row's summed gradient or new optimizer state is non-finite, or its
                  ///< update NaN, although grad_output is finite (float overflow); pos = unique index
                  ///< v = {global row, occurrences, float bits of the first non-finite value}
  kNumChecks
};

/// Verdict of one call's checks, in backend memory.
struct CallRecord {
  index_t pos[kNumChecks];   ///< smallest failing position per check, kNoError if it passed
  index_t v[kNumChecks][3];  ///< values captured at that position (see Check)
  index_t differs;           ///< synchronous mode: first difference from the pending prefetch
  index_t apply;             ///< backward: 1 when the update runs
};

/// Which call filed a deferred error.
enum CallKind : std::int32_t { kCallPrefetch, kCallForward, kCallBackward };

/// The first unreported error of Validation::Deferred, in backend memory.
struct DeferredError {
  index_t check;  ///< Check, or -1: none
  index_t call;   ///< CallKind
  index_t seq;    ///< the call's number: its 1-based count among prefetch/forward/backward calls
  index_t pos;
  index_t v[3];
  index_t later;  ///< failed calls after this one (not reported individually)
};

/// Slots of a batch's flags in backend memory.
enum BatchFlag : std::int32_t {
  kFlagOk,     ///< 1: the batch passed validation (its updates may run)
  kFlagSkip,   ///< 1: non-finite per-sample weights under NonFinite::Skip
  kFlagU,      ///< unique rows of the batch (after sort_unique)
  kFlagApply,  ///< backward: 1 when the update runs
  kNumFlags
};

/// Device-side gate: true when `gate` is null (no gating) or holds non-zero.
MPE_HOST_DEVICE inline bool open(const index_t* gate) { return gate == nullptr || *gate != 0; }

/// Every check of `r` passed.
MPE_HOST_DEVICE inline void reset_record(CallRecord* r) {
  for (int c = 0; c < kNumChecks; ++c) {
    r->pos[c] = kNoError;
    r->v[c][0] = r->v[c][1] = r->v[c][2] = 0;
  }
  r->differs = kNoError;
  r->apply = 0;
}

/// Single item: clears a call record (queued, so no host-to-device copy is needed).
struct ResetRecord {
  CallRecord* rec;
  MPE_HOST_DEVICE void operator()(index_t) const { reset_record(rec); }
};

/// Single item: *p = v.
struct SetIndex {
  index_t* p;
  index_t v;
  MPE_HOST_DEVICE void operator()(index_t) const { *p = v; }
};

/// Single item: *p += v (a counter in backend memory).
struct AddCount {
  std::uint64_t* p;
  std::uint64_t v;
  MPE_HOST_DEVICE void operator()(index_t) const { *p += v; }
};

/// Items j < bags: bag j is malformed when offsets[j] > offsets[j+1] (smallest j kept).
/// Item j == bags checks offsets[0] == 0 and offsets[bags] == n. Launch bags + 1 items.
struct CheckOffsets {
  const index_t* offsets;  // (bags + 1)
  index_t bags;
  index_t n;
  CallRecord* rec;
  MPE_HOST_DEVICE void operator()(index_t j) const {
    if (j < bags) {
      if (offsets[j] > offsets[j + 1]) atomic_min(&rec->pos[kOffsetsOrder], j);
      return;
    }
    if (offsets[0] != 0) rec->pos[kOffsetsFirst] = 0;
    if (offsets[bags] != n) rec->pos[kOffsetsLast] = bags;
  }
};

/// Table t and sample b of bag j = t * B + b (j in [0, B * T)): 32-bit division where both
/// fit (several times cheaper than a 64-bit one on x86-64), the same integers either way.
MPE_HOST_DEVICE inline void split_bag(index_t j, index_t B, index_t& t, index_t& b) {
  if (((static_cast<std::uint64_t>(j) | static_cast<std::uint64_t>(B)) >> 32) == 0) {
    t = static_cast<index_t>(static_cast<std::uint32_t>(j) / static_cast<std::uint32_t>(B));
  } else {
    t = j / B;
  }
  b = j - t * B;
}

/// First non-finite value of an array.
struct CheckFinite {
  const float* values;
  index_t* bad_pos;
  MPE_HOST_DEVICE void operator()(index_t i) const {
    if (!num::is_finite(values[i])) atomic_min(bad_pos, i);
  }
};

/// Smallest position where a batch differs from the pending prefetch's copy: k < n in the
/// indices, n + j in the offsets. Launch n + m items.
struct CompareBatch {
  const index_t* indices;  // (n)
  const index_t* pending_indices;
  index_t n;
  const index_t* offsets;  // (m)
  const index_t* pending_offsets;
  index_t* bad_pos;
  MPE_HOST_DEVICE void operator()(index_t k) const {
    const bool differs = k < n ? indices[k] != pending_indices[k] : offsets[k - n] != pending_offsets[k - n];
    if (differs) atomic_min(bad_pos, k);
  }
};

/// Files the first failing check of `rec` (if any) as the deferred error of call `seq`, or
/// counts it as a later one.
MPE_HOST_DEVICE inline void file_deferred(const CallRecord& rec, int check, index_t call, index_t seq,
                                          DeferredError* d) {
  if (d->check >= 0) {
    ++d->later;
    return;
  }
  d->check = check;
  d->call = call;
  d->seq = seq;
  d->pos = rec.pos[check];
  for (int k = 0; k < 3; ++k) d->v[k] = rec.v[check][k];
}

/// Single item, after a forward()/prefetch()'s checks: captures the values at the failing
/// positions, then sets the target batch's flags (ok, skip) and, in deferred mode, files the
/// error. `fresh`: the flags start from ok = 1, skip = 0 (a batch validated here), else
/// they are narrowed (the pending prefetch's batch, validated when it was prefetched).
struct SealForward {
  CallRecord* rec;
  const index_t* offsets;  // (bags + 1)
  index_t bags, n, B;
  const index_t* indices;  // (n)
  const float* weights;    // (n) or null
  bool skip_non_finite;    // NonFinite::Skip
  index_t* flags;          // (kNumFlags) target batch, or null
  bool fresh;
  DeferredError* deferred;  // or null (synchronous validation)
  index_t call, seq;
  MPE_HOST_DEVICE void operator()(index_t) const {
    CallRecord& r = *rec;
    if (r.pos[kOffsetsFirst] != kNoError) r.v[kOffsetsFirst][0] = offsets[0];
    if (r.pos[kOffsetsLast] != kNoError) {
      r.v[kOffsetsLast][0] = offsets[bags];
      r.v[kOffsetsLast][1] = n;
    }
    if (const index_t j = r.pos[kOffsetsOrder]; j != kNoError) {
      r.v[kOffsetsOrder][0] = offsets[j];
      r.v[kOffsetsOrder][1] = offsets[j + 1];
    }
    if (const index_t i = r.pos[kWeights]; i != kNoError) r.v[kWeights][0] = num::float_bits(weights[i]);
    if (r.pos[kMismatch] != kNoError) r.v[kMismatch][0] = n;
    if (const index_t i = r.pos[kIndex]; i != kNoError) {
      // Offsets are valid here (the index check runs only then): the bag holding i is the
      // last j with offsets[j] <= i.
      index_t lo = 0, hi = bags;  // answer in [lo, hi)
      while (hi - lo > 1) {
        const index_t mid = lo + (hi - lo) / 2;
        if (offsets[mid] <= i) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
      r.v[kIndex][0] = indices[i];
      r.v[kIndex][1] = lo;
      r.v[kIndex][2] = B > 0 ? lo / B : 0;
    }
    const bool skip = skip_non_finite && r.pos[kWeights] != kNoError;
    int first = -1;
    for (int c = 0; c < kNumChecks && first < 0; ++c) {
      if (r.pos[c] != kNoError && !(c == kWeights && skip_non_finite)) first = c;
    }
    if (flags) {
      if (fresh) {
        flags[kFlagOk] = first < 0 ? 1 : 0;
        flags[kFlagSkip] = skip ? 1 : 0;
      } else {
        flags[kFlagOk] = (flags[kFlagOk] != 0 && first < 0) ? 1 : 0;
        flags[kFlagSkip] = (flags[kFlagSkip] != 0 || skip) ? 1 : 0;
      }
    }
    if (deferred && first >= 0) file_deferred(r, first, call, seq, deferred);
  }
};

/// Single item, after backward()'s checks (grad_output finite, and every row's summed
/// gradient and optimizer update finite): the update runs (flags[kFlagApply] = 1) when the
/// batch passed validation, has no skip flag and both checks passed. A skip (non-finite
/// input or overflow under NonFinite::Skip) adds one to *skipped_steps; a failure otherwise
/// is an error (filed in deferred mode).
struct SealBackward {
  CallRecord* rec;
  const float* grad;             // (B, T*D)
  const index_t* uniq;           // (U) the batch's unique rows
  const index_t* occ_to_unique;  // (n) each occurrence's unique index (the overflow message's count)
  index_t n;                     // occurrences
  const float* row_grad;         // (U, D) updates, or the summed gradient where it overflowed
  const float* row_update;       // (U, state floats) new optimizer states
  std::int32_t D;
  std::int64_t update_floats;
  bool skip_non_finite;
  index_t* flags;  // (kNumFlags) the batch
  std::uint64_t* skipped_steps;
  DeferredError* deferred;  // or null
  index_t seq;
  MPE_HOST_DEVICE void operator()(index_t) const {
    CallRecord& r = *rec;
    const index_t i = r.pos[kGrad];
    if (i != kNoError) r.v[kGrad][0] = num::float_bits(grad[i]);
    if (const index_t u = r.pos[kOverflow]; u != kNoError) {
      r.v[kOverflow][0] = uniq[u];
      // Counted on this error path only: every dedup (sort or bitmap) writes occ_to_unique.
      index_t occurrences = 0;
      for (index_t k = 0; k < n; ++k) occurrences += occ_to_unique[k] == u ? 1 : 0;
      r.v[kOverflow][1] = occurrences;
      float bad = 0.0f;
      bool found = false;
      for (std::int32_t d = 0; d < D && !found; ++d) {
        found = !num::is_finite(row_grad[u * D + d]);
        if (found) bad = row_grad[u * D + d];
      }
      for (std::int64_t k = 0; k < update_floats && !found; ++k) {
        found = !num::is_finite(row_update[u * update_floats + k]);
        if (found) bad = row_update[u * update_floats + k];
      }
      r.v[kOverflow][2] = num::float_bits(bad);
    }
    const bool failed = i != kNoError || r.pos[kOverflow] != kNoError;
    const bool ok = flags[kFlagOk] != 0;
    const bool skip = flags[kFlagSkip] != 0 || (failed && skip_non_finite);
    const bool error = failed && !skip_non_finite;
    flags[kFlagApply] = ok && !skip && !error ? 1 : 0;
    r.apply = flags[kFlagApply];
    if (ok && skip && !error) *skipped_steps += 1;
    if (deferred && ok && error) {
      file_deferred(r, i != kNoError ? kGrad : kOverflow, kCallBackward, seq, deferred);
    }
  }
};

/// First failing check of a record read back to the host, or -1.
inline int first_failure(const CallRecord& r, bool skip_non_finite) {
  for (int c = 0; c < kNumChecks; ++c) {
    if (r.pos[c] != kNoError && !(skip_non_finite && (c == kWeights || c == kGrad || c == kOverflow)))
      return c;
  }
  return -1;
}

inline const char* call_name(index_t call) {
  return call == kCallPrefetch ? "prefetch" : call == kCallForward ? "forward" : "backward";
}

}  // namespace mpe::detail
