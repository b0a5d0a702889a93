// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for CachedEmbedding's checkpoint reader (detail::CheckpointAccess::
// load_bytes, which load() runs on the file's bytes). Each input is loaded twice into each
// of two embeddings: as given (exercises the framing and checksum checks) and with every
// checksum recomputed by an independent walk of the documented layout (so mutations reach
// the header-field and cache-metadata checks behind the checksums). A load may only fail
// with mpe::checkpoint_error; a successful load is followed by a training step and a read
// of every weight, so a state that passed verification but is unsafe shows up under ASan.
#include <cstdint>
#include <cstring>
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
  std::size_t p = H;
  for (int i = 0; i < 7; ++i) {
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

template <class E>
void try_load(const std::vector<std::uint8_t>& bytes, bool cache) {
  E e(mpe_fuzz::config(cache), mpe::HostBackend{1});
  try {
    mpe::detail::CheckpointAccess::load_bytes(e, bytes.data(), bytes.size(), "fuzz");
  } catch (const mpe::checkpoint_error&) {
    return;
  }
  std::vector<float> w(static_cast<std::size_t>(e.total_rows() * e.dim()));
  e.get_weights(w);
  try {
    mpe_fuzz::step(e, 1);
  } catch (const std::logic_error&) {
    // a loaded optimizer kind other than RowwiseAdagrad: backward refuses, as documented
  }
  e.get_weights(w);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> bytes(data, data + size);
  try_load<mpe_fuzz::Lfu4>(bytes, true);
  try_load<mpe_fuzz::NoCache8>(bytes, false);
  if (restamp(bytes)) {
    try_load<mpe_fuzz::Lfu4>(bytes, true);
    try_load<mpe_fuzz::NoCache8>(bytes, false);
  }
  return 0;
}
