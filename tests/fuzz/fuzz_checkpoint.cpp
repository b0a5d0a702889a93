// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for CachedEmbedding's checkpoint reader (mpe::io::load_from_bytes:
// what load() runs on the file's bytes). Each input is loaded twice into each
// of three embeddings (fuzz_common.hpp: two with FP32 optimizer state, one with BF16): as
// given (exercises the framing and checksum checks) and with every checksum recomputed by
// an independent walk of the documented layout (so mutations reach the header-field,
// cache-metadata and value checks behind the checksums). A custom mutator (value mode)
// half of the time writes a value the state cannot hold (NaN, +-inf, -1, 3e38, 65520, ...)
// at an aligned offset of a random section and re-signs the checksums, so the value checks
// of every section are fuzzed, not only the CRCs. A load may only fail with
// mpe::checkpoint_error, or with std::invalid_argument for a file of another
// optimizer-state precision (a documented refusal); a successful load is followed by a
// forward of the pending batch (when the file has one), a training step and a read of
// every weight, so a state that passed verification but is unsafe shows up under
// ASan/UBSan; every weight read must be finite.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "fuzz_common.hpp"

namespace {

std::uint32_t get32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void put32(std::uint8_t* p, std::uint32_t v) { std::memcpy(p, &v, 4); }

// Recomputes the header, section and file checksums where the layout allows; returns
// false when the bytes are too malformed to walk.
bool restamp(std::vector<std::uint8_t>& b) {
  using mpe::io::checkpoint::crc32c;
  if (b.size() < 16 + 4 + mpe::io::checkpoint::kTrailerBytes) return false;
  const std::size_t H = get32(b.data() + 12);
  if (H < 20 || H > b.size()) return false;
  put32(b.data() + H - 4, crc32c(b.data(), H - 4));
  const std::uint32_t n_sections = get32(b.data() + H - 8);
  if (n_sections > mpe::io::checkpoint::kNumSections) return false;
  std::size_t p = H;
  for (std::uint32_t i = 0; i < n_sections; ++i) {
    if (b.size() - p < 2) return false;
    std::uint16_t n;
    std::memcpy(&n, b.data() + p, 2);
    p += 2;
    if (b.size() - p < n + 8u) return false;
    p += n;
    std::uint64_t len;
    std::memcpy(&len, b.data() + p, 8);
    p += 8;
    if (len > b.size() - p || b.size() - p - len < 4) return false;
    put32(b.data() + p + len, crc32c(b.data() + p, static_cast<std::size_t>(len)));
    p += static_cast<std::size_t>(len) + 4;
  }
  put32(b.data() + b.size() - 4, crc32c(b.data(), b.size() - 4));
  return true;
}

/// Payload offsets of the sections of a checkpoint whose layout walks (empty otherwise).
std::vector<std::pair<std::size_t, std::size_t>> section_spans(const std::vector<std::uint8_t>& b) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  if (b.size() < 24) return out;
  const std::size_t H = get32(b.data() + 12);
  if (H < 24 || H > b.size()) return out;
  const std::uint32_t n_sections = get32(b.data() + H - 8);
  std::size_t p = H;
  for (std::uint32_t i = 0; i < n_sections && i < mpe::io::checkpoint::kNumSections; ++i) {
    if (b.size() - p < 2) return {};
    std::uint16_t n;
    std::memcpy(&n, b.data() + p, 2);
    p += 2;
    if (b.size() - p < n + 8u) return {};
    p += n;
    std::uint64_t len;
    std::memcpy(&len, b.data() + p, 8);
    p += 8;
    if (len > b.size() - p || b.size() - p - len < 4) return {};  // payload and its CRC
    out.emplace_back(p, static_cast<std::size_t>(len));
    p += static_cast<std::size_t>(len) + 4;
  }
  return out;
}

template <class E>
void try_load(const std::vector<std::uint8_t>& bytes, bool cache) {
  E e(mpe_fuzz::config(cache), mpe::HostBackend{1});
  try {
    mpe::io::load_from_bytes(e, bytes, "fuzz");
  } catch (const mpe::checkpoint_error&) {
    return;
  } catch (const std::invalid_argument&) {  // a file of another optimizer-state precision
    return;
  }
  std::vector<float> w(static_cast<std::size_t>(e.total_rows() * e.dim()));
  e.get_weights(w);
  for (float x : w) {
    if (!std::isfinite(x)) std::abort();  // verification let a non-finite value through
  }
  // A restored pending batch must be usable by the forward that consumes it.
  const mpe::TableState state = e.state();
  if (!state.pending_offsets.empty()) {
    const std::vector<std::int64_t> idx(state.pending_indices.begin(), state.pending_indices.end()),
        off(state.pending_offsets.begin(), state.pending_offsets.end());
    const auto B = static_cast<std::int64_t>(off.size() - 1) / e.num_tables();
    std::vector<float> out(static_cast<std::size_t>(B * e.num_tables() * e.dim()));
    e.forward(idx, off, out);
    std::vector<float> grad(out.size(), 0.01f);
    try {
      e.backward(grad, mpe::RowwiseAdagrad{0.3f});
    } catch (const std::logic_error&) {
      // a loaded optimizer kind other than RowwiseAdagrad
    }
  }
  try {
    mpe_fuzz::step(e, 1);
  } catch (const std::logic_error&) {
    // a loaded optimizer kind other than RowwiseAdagrad: backward refuses, as documented
  }
  e.get_weights(w);
}

}  // namespace

// Value mode: write a value the state cannot hold at an aligned offset of a random
// section, then re-sign; otherwise libFuzzer's own byte mutations.
extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);
extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  std::minstd_rand rng(seed);
  std::vector<std::uint8_t> b(data, data + size);
  const auto spans = section_spans(b);
  if (spans.empty() || rng() % 2 == 0) return LLVMFuzzerMutate(data, size, max_size);
  const auto [at, len] = spans[rng() % spans.size()];
  if (len < 4) return LLVMFuzzerMutate(data, size, max_size);
  static const float kFloats[] = {std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(),
                                  -1.0f,
                                  3e38f,
                                  65520.0f,
                                  -65536.0f,
                                  0x1p127f,
                                  1e-45f};
  static const std::int64_t kInts[] = {-1, -2, 0, 1, 7, 1 << 20, INT64_MAX, INT64_MIN};
  const std::size_t pos = at + (rng() % (len / 4)) * 4;
  if (rng() % 2 == 0) {
    const float v = kFloats[rng() % (sizeof kFloats / sizeof kFloats[0])];
    std::memcpy(b.data() + pos, &v, 4);
  } else if (pos + 8 <= at + len) {
    const std::int64_t v = kInts[rng() % (sizeof kInts / sizeof kInts[0])];
    std::memcpy(b.data() + pos, &v, 8);
  } else {
    b[pos] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
  }
  restamp(b);
  std::memcpy(data, b.data(), b.size());
  return b.size();
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> bytes(data, data + size);
  try_load<mpe_fuzz::Lfu4>(bytes, true);
  try_load<mpe_fuzz::NoCache8>(bytes, false);
  try_load<mpe_fuzz::Lfu4Bf16>(bytes, true);
  if (restamp(bytes)) {
    try_load<mpe_fuzz::Lfu4>(bytes, true);
    try_load<mpe_fuzz::NoCache8>(bytes, false);
    try_load<mpe_fuzz::Lfu4Bf16>(bytes, true);
  }
  return 0;
}
