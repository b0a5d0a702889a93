// SPDX-License-Identifier: Apache-2.0
// The host fast path of forward pooling (detail/host/avx2/pool.hpp: AVX2 + F16C, chosen at run
// time) against the portable code it replaces, bit for bit:
// - the hardware FP16 decode (vcvtph2ps plus the NaN quiet-bit fix) equals
//   num::half_to_float for every one of the 65,536 codes, and the BF16 decode equals
//   num::bf16_to_float for every code;
// - the decode pooling uses (vcvtph2ps alone) gives, after the add / multiply-add that
//   consumes it, the bits of the software decode through the same operations, for every
//   code and accumulators including +-0, +-inf and NaN;
// - detail::PoolBags with the AVX2 kernel, the AVX-512 kernel (detail/host/avx512/pool.hpp: bags
//   of one row array, where the CPU has it) and the portable loop gives the same output bits, on random
//   rows of every format that has a fast decoder (and Fp8, which has none), D = 1 .. 130
//   (odd D and partial groups of 8), sum / mean / per-sample weights, empty bags and
//   duplicates, store only, with populate's slots (some dropped, or nearly all cached: the
//   FP32 cache-row path) and with set lookup, bag by bag and in ranges (host_range);
// - the cache fill's decode (detail::simd::decode_row) equals the Reader and the SIMD tag
//   scan (detail::simd::find_tag) equals CacheRef::find's loop.
// - every FP16 code through the AVX-512 kernel, as accumulator and as addend, gives the
//   portable loop's bits.
// On a CPU without AVX2 + F16C (or a build without the fast path) the comparisons run the
// portable path twice and the decode checks are skipped (reported); without AVX-512 the
// AVX2 kernel stands in for it.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <mpe/mpe.hpp>
#include <random>
#include <vector>

namespace {

/// Restores the switches (host SIMD, AVX-512) on scope exit.
struct SimdSwitch {
  bool saved;
  bool saved512;
  // set_host_avx512 returns the switch's setting before: read it, put it back.
  SimdSwitch() : saved(mpe::detail::host_simd_enabled()), saved512(mpe::detail::set_host_avx512(true)) {
    mpe::detail::set_host_avx512(saved512);
  }
  ~SimdSwitch() {
    mpe::detail::set_host_simd(saved);
    mpe::detail::set_host_avx512(saved512);
  }
};

/// The pooling kernels: the portable loop, the AVX2 kernel, the AVX-512 kernel for bags of
/// one row array (where the CPU has it; else the AVX2 kernel again).
enum class Kernel { Portable, Avx2, Avx512 };

void use_kernel(Kernel k) {
  mpe::detail::set_host_simd(k != Kernel::Portable);
  mpe::detail::set_host_avx512(k == Kernel::Avx512);
}

#if MPE_HOST_SIMD
std::vector<std::uint32_t> decode_all(bool bf16) {
  std::vector<std::uint8_t> codes(2 * 65536);
  for (std::uint32_t h = 0; h < 65536; ++h) {
    codes[2 * h] = static_cast<std::uint8_t>(h & 0xff);
    codes[2 * h + 1] = static_cast<std::uint8_t>(h >> 8);
  }
  std::vector<std::uint32_t> bits(65536);
  for (std::int32_t c = 0; c < 65536; c += 8) {
    float v[8];
    if (bf16) {
      mpe::detail::simd::store8(v, mpe::detail::simd::Row<mpe::Bf16>(codes.data(), 65536), c);
    } else {
      mpe::detail::simd::store8(v, mpe::detail::simd::Row<mpe::Fp16>(codes.data(), 65536), c);
    }
    for (int k = 0; k < 8; ++k) std::memcpy(&bits[static_cast<std::size_t>(c + k)], &v[k], 4);
  }
  return bits;
}
#endif

}  // namespace

TEST_CASE("hardware FP16 and BF16 decodes equal the software decode for all 65,536 codes") {
#if MPE_HOST_SIMD
  if (!mpe::detail::cpu_has_avx2_f16c()) {
    MESSAGE("CPU without AVX2 + F16C: the fast decode is never used here; skipped");
    return;
  }
  const std::vector<std::uint32_t> h = decode_all(false);
  const std::vector<std::uint32_t> b = decode_all(true);
  int bad_h = 0, bad_b = 0;
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const auto code = static_cast<std::uint16_t>(c);
    if (h[c] != mpe::num::float_bits(mpe::num::half_to_float(code))) ++bad_h;
    if (b[c] != mpe::num::float_bits(mpe::num::bf16_to_float(code))) ++bad_b;
  }
  CHECK(bad_h == 0);
  CHECK(bad_b == 0);
  // The signalling NaN 0x7c01 keeps its quiet bit clear (vcvtph2ps alone would set it).
  CHECK(h[0x7c01] == 0x7f802000u);
  CHECK(h[0xfe00] == 0xffc00000u);
#else
  MESSAGE("built without the host SIMD path (MPE_HOST_SIMD = 0); skipped");
#endif
}

TEST_CASE("the pooling FP16 decode (no NaN fix) gives the software decode's bits after add and multiply") {
#if MPE_HOST_SIMD
  if (!mpe::detail::cpu_has_avx2_f16c()) {
    MESSAGE("CPU without AVX2 + F16C; skipped");
    return;
  }
  std::vector<std::uint8_t> codes(2 * 65536);
  for (std::uint32_t h = 0; h < 65536; ++h) {
    codes[2 * h] = static_cast<std::uint8_t>(h & 0xff);
    codes[2 * h + 1] = static_cast<std::uint8_t>(h >> 8);
  }
  const float qnan = mpe::num::bits_float(0x7fc12345u);
  int bad = 0;
  for (const float a : {0.0f, -0.0f, 1.0f, -3.5f, 65504.0f, 1e30f, HUGE_VALF, -HUGE_VALF, qnan}) {
    for (const bool weighted : {false, true}) {
      for (const float w : {1.0f, -0.0f, 1.5f, 0x1p-20f}) {
        const float acc[8] = {a, a, a, a, a, a, a, a};
        for (std::int32_t c = 0; c < 65536; c += 8) {
          float got[8];
          mpe::detail::simd::pool_step8<mpe::Fp16>(got, codes.data(), 65536, c, acc, w, weighted);
          for (int k = 0; k < 8; ++k) {
            const float x = mpe::num::half_to_float(static_cast<std::uint16_t>(c + k));
            const float want = weighted ? mpe::num::add(a, mpe::num::mul(w, x)) : mpe::num::add(a, x);
            if (mpe::num::float_bits(got[k]) != mpe::num::float_bits(want)) ++bad;
          }
        }
      }
    }
  }
  CHECK(bad == 0);
#else
  MESSAGE("built without the host SIMD path (MPE_HOST_SIMD = 0); skipped");
#endif
}

namespace {

std::uint16_t random_finite_half(std::mt19937& rng) {
  for (;;) {
    const auto h = static_cast<std::uint16_t>(rng() & 0xffff);
    if ((h & 0x7c00) != 0x7c00) return h;
  }
}

/// A random store row of format S (finite values, every code pattern reachable).
template <class S>
void random_row(std::uint8_t* row, std::int32_t D, std::mt19937& rng) {
  if constexpr (std::is_same_v<S, mpe::Fp32>) {
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    std::uniform_int_distribution<int> e(-30, 30);
    for (std::int32_t d = 0; d < D; ++d) mpe::num::store_f32(row + 4 * d, std::ldexp(u(rng), e(rng)));
  } else if constexpr (std::is_same_v<S, mpe::Fp16>) {
    for (std::int32_t d = 0; d < D; ++d) mpe::num::store_u16(row + 2 * d, random_finite_half(rng));
  } else if constexpr (std::is_same_v<S, mpe::Bf16>) {
    for (std::int32_t d = 0; d < D; ++d) {
      std::uint16_t b;
      do {
        b = static_cast<std::uint16_t>(rng() & 0xffff);
      } while ((b & 0x7f80) == 0x7f80);
      mpe::num::store_u16(row + 2 * d, b);
    }
  } else if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
    for (std::int32_t d = 0; d < D; ++d) row[d] = static_cast<std::uint8_t>(rng());
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    mpe::num::store_f32(row + D, std::ldexp(u(rng), -7));
    mpe::num::store_f32(row + D + 4, u(rng));
  } else if constexpr (mpe::detail::FusedNbitStorage<S>) {
    const std::int32_t nb = (D + 8 / S::bits - 1) / (8 / S::bits);
    for (std::int32_t i = 0; i < nb; ++i) row[i] = static_cast<std::uint8_t>(rng());
    mpe::num::store_u16(row + nb, random_finite_half(rng));
    mpe::num::store_u16(row + nb + 2, random_finite_half(rng));
  } else {  // other formats: quantize random values through the format's own store
    std::vector<float> x(static_cast<std::size_t>(D));
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (auto& v : x) v = u(rng);
    S::template store<mpe::NearestRounding>(x.data(), D, row,
                                            mpe::num::RowRng{1, 0, 0, mpe::num::RoundingSite::SetWeights});
  }
}

/// Random store rows of format S (T tables of `rows` rows) and T*B bags of 0 .. max_len - 1
/// occurrences each (duplicates allowed), bag j = t*B + b drawing from table t. With
/// `singles` most bags hold one row (runs of one-row bags, the one-index-per-bag step's
/// shape), one in eight none or two.
template <class S>
void random_batch(std::mt19937& rng, std::int32_t D, std::int64_t rows, std::int64_t T, std::int64_t B,
                  int max_len, std::vector<std::uint8_t>& store, std::vector<std::int64_t>& offsets,
                  std::vector<std::int64_t>& global_rows, bool singles = false) {
  const std::size_t stride = mpe::row_bytes<S>(D, 4);
  store.assign(static_cast<std::size_t>(T * rows) * stride + 64, 0);
  for (std::int64_t r = 0; r < T * rows; ++r)
    random_row<S>(store.data() + static_cast<std::size_t>(r) * stride, D, rng);
  offsets.assign(1, 0);
  global_rows.clear();
  for (std::int64_t j = 0; j < T * B; ++j) {
    int L = static_cast<int>(rng() % static_cast<unsigned>(max_len));
    if (singles) L = rng() % 8 != 0 ? 1 : (rng() % 2 == 0 ? 0 : 2);
    for (int k = 0; k < L; ++k)
      global_rows.push_back((j / B) * rows +
                            static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(rows)));
    offsets.push_back(static_cast<std::int64_t>(global_rows.size()));
  }
}

// Populated: about half the rows admitted, some lines dropped after (mixed bags); Cached:
// every row admitted where its set has room (most bags wholly cached: the FP32 cache-row path).
enum class Slots { None, Populated, Cached, Lookup };

/// PoolBags over random rows with the fast path on and off: the bits must agree.
template <class S>
void check_pool(std::int32_t D, Slots slots, bool weighted, bool mean, std::uint32_t seed,
                bool singles = false) {
  std::mt19937 rng(seed);
  const std::int64_t rows = 97, T = 2, B = 9;
  const std::size_t stride = mpe::row_bytes<S>(D, 4);
  std::vector<std::uint8_t> store;
  std::vector<std::int64_t> offsets, global_rows;
  random_batch<S>(rng, D, rows, T, B, 12, store, offsets, global_rows, singles);  // bags of 0 .. 11
  const auto n = static_cast<std::int64_t>(global_rows.size());
  std::vector<float> weights(static_cast<std::size_t>(n));
  std::uniform_real_distribution<float> wd(-2.0f, 2.0f);
  for (auto& w : weights) w = wd(rng);
  // A 4-way cache of 8 sets holding some rows (random FP32 contents differing from the store).
  const std::int64_t sets = slots == Slots::Cached ? 64 : 8;
  const std::int32_t ways = 4;
  std::vector<float> crow(static_cast<std::size_t>(sets * ways * D));
  std::vector<std::int64_t> tags(static_cast<std::size_t>(sets * ways), -1);
  std::vector<std::uint64_t> last_use(tags.size(), 0);
  std::vector<std::uint8_t> dirty(tags.size(), 0);
  std::uniform_real_distribution<float> cv(-5.0f, 5.0f);
  for (auto& v : crow) v = cv(rng);
  // Some -0.0 elements (a one-row bag's add(0, x) makes them +0) and one signalling NaN
  // (quieted by the first operation; one NaN value, so a bag adding it twice gets one payload).
  for (std::size_t k = 3; k < crow.size(); k += 11) crow[k] = -0.0f;
  crow[crow.size() / 2] = std::bit_cast<float>(0xff812345u);
  mpe::CacheRef cache{crow.data(), tags.data(), last_use.data(), dirty.data(), sets, ways, D};
  std::vector<std::int64_t> occ_to_unique(static_cast<std::size_t>(n)),
      slot_of_unique(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    occ_to_unique[static_cast<std::size_t>(i)] = i;  // one "unique" entry per occurrence
    const std::int64_t r = global_rows[static_cast<std::size_t>(i)];
    std::int64_t s = cache.find(r);
    if (s < 0 && (slots == Slots::Cached || rng() % 2 == 0)) {  // admit into a free way of its set
      const std::int64_t base = cache.set_of(r) * ways;
      for (std::int32_t w = 0; w < ways; ++w) {
        if (tags[static_cast<std::size_t>(base + w)] < 0) {
          tags[static_cast<std::size_t>(base + w)] = r;
          s = base + w;
          break;
        }
      }
    }
    slot_of_unique[static_cast<std::size_t>(i)] = s;
  }
  // a slot given by populate whose line was dropped since (read from the store instead)
  for (std::int64_t i = 0; slots == Slots::Populated && i < n; i += 7) {
    const std::int64_t s = slot_of_unique[static_cast<std::size_t>(i)];
    if (s >= 0 && rng() % 3 == 0) tags[static_cast<std::size_t>(s)] = -1;
  }
  // What the forward hands PoolBags: each occurrence's slot checked against its tag.
  std::vector<std::int64_t> slot_of_occ(static_cast<std::size_t>(n), -7);
  for (std::int64_t i = 0; i < n; ++i) {
    mpe::detail::OccurrenceSlots{global_rows.data(),
                                 occ_to_unique.data(),
                                 slot_of_unique.data(),
                                 cache,
                                 true,
                                 slot_of_occ.data(),
                                 nullptr}(i);
  }
  std::int64_t whole_bags = 0;  // bags with at least one row, all cached (the FP32 cache-row path)
  for (std::int64_t j = 0; j < T * B; ++j) {
    bool all = offsets[static_cast<std::size_t>(j + 1)] > offsets[static_cast<std::size_t>(j)];
    for (std::int64_t i = offsets[static_cast<std::size_t>(j)]; i < offsets[static_cast<std::size_t>(j + 1)];
         ++i)
      all = all && slot_of_occ[static_cast<std::size_t>(i)] >= 0;
    whole_bags += all ? 1 : 0;
  }
  if (slots == Slots::Cached) CHECK(whole_bags >= 3);
  // Lookup (forward_inference): ProbeSlots' slots, in two host ranges (the portable scan,
  // then the AVX2 one), laned (3 lanes across the 4 ways, over -1) and with one lane (over
  // garbage), each CacheRef::find's.
  std::vector<std::int64_t> probed(static_cast<std::size_t>(n), -1);
  if (slots == Slots::Lookup) {
    const mpe::detail::ProbeSlots<mpe::detail::HostPaths> probe{global_rows.data(), cache, probed.data()};
    std::int64_t hits = 0;
    for (int mode = 0; mode < 4; ++mode) {  // portable, AVX2, 3 lanes, 1 lane
      CAPTURE(mode);
      std::fill(probed.begin(), probed.end(), mode == 2 ? -1 : -7);
      if (mode >= 2) {
        const std::int32_t lanes = mode == 2 ? 3 : 1;
        for (std::int64_t i = 0; i < n; ++i)
          for (std::int32_t lane = 0; lane < lanes; ++lane) probe(i, lane, lanes);
      } else {
        use_kernel(mode == 0 ? Kernel::Portable : Kernel::Avx2);
        probe.host_range(0, n / 2);
        probe.host_range(n / 2, n);
      }
      hits = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t s = probed[static_cast<std::size_t>(i)];
        CHECK(s == cache.find(global_rows[static_cast<std::size_t>(i)]));
        hits += s >= 0 ? 1 : 0;
      }
    }
    CHECK(hits > 0);
    CHECK(hits < n);
  }
  std::vector<float> out_fast(static_cast<std::size_t>(B * T * D), -1.0f), out_port(out_fast.size(), -2.0f);
  // ranged: the bags as HostBackend hands them out (PoolBags::host_range), in two ranges
  // split at an odd bag so the second starts mid-table.
  auto run = [&](Kernel kernel, std::vector<float>& out, bool ranged = false) {
    use_kernel(kernel);
    if (kernel == Kernel::Avx512 && mpe::detail::cpu_has_avx512())
      REQUIRE(mpe::detail::host_avx512_enabled());
    const mpe::detail::PoolBags<S, mpe::detail::kPoolLaneGroup, mpe::detail::HostPaths> pb{
        offsets.data(),
        global_rows.data(),
        slots == Slots::Populated || slots == Slots::Cached ? slot_of_occ.data()
        : slots == Slots::Lookup                            ? probed.data()
                                                            : nullptr,
        weighted ? weights.data() : nullptr,
        slots == Slots::None ? mpe::CacheRef{} : cache,
        store.data(),
        stride,
        B,
        T,
        D,
        mean,
        out.data(),
        nullptr};
    if (ranged) {
      pb.host_range(0, 5);
      // The first range wrote nothing of the bags past it (a run must stop at its end).
      std::int64_t written_past = 0;
      for (std::int64_t j = 5; j < T * B; ++j) {
        const std::int64_t t = j / B, b = j % B;
        for (std::int32_t d = 0; d < D; ++d)
          written_past += out[static_cast<std::size_t>((b * T + t) * D + d)] != -4.0f ? 1 : 0;
      }
      CHECK(written_past == 0);
      pb.host_range(5, T * B);
    } else {
      for (std::int64_t j = 0; j < T * B; ++j) pb(j);
    }
  };
  run(Kernel::Portable, out_port);
  for (const Kernel kernel : {Kernel::Avx2, Kernel::Avx512}) {
    CAPTURE(static_cast<int>(kernel));
    std::fill(out_fast.begin(), out_fast.end(), -1.0f);
    run(kernel, out_fast);
    CHECK(std::memcmp(out_fast.data(), out_port.data(), out_fast.size() * sizeof(float)) == 0);
    // (The portable host_range is the bag-by-bag loop itself: only the fast ones are compared.)
    std::vector<float> out_range(out_fast.size(), -4.0f);
    run(kernel, out_range, true);
    CHECK(std::memcmp(out_range.data(), out_port.data(), out_fast.size() * sizeof(float)) == 0);
  }
}

template <class S>
void check_format() {
  const SimdSwitch restore;
  std::uint32_t seed = 1;
  for (const std::int32_t D : {1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 63, 64, 65, 72, 127, 128, 130}) {
    for (const Slots slots : {Slots::None, Slots::Populated, Slots::Cached, Slots::Lookup}) {
      for (const bool weighted : {false, true}) {
        for (const bool mean : {false, true}) {
          if (weighted && mean) continue;
          CAPTURE(D);
          CAPTURE(static_cast<int>(slots));
          CAPTURE(weighted);
          CAPTURE(mean);
          check_pool<S>(D, slots, weighted, mean, seed++);
          // Runs of one-row bags (simd512::pool_single_rows), cut by the tables' ends and
          // by host_range's split at bag 5.
          check_pool<S>(D, slots, weighted, mean, seed++, true);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("fast and portable pooling give the same bits") {
  if (!mpe::detail::host_simd_enabled())
    MESSAGE("host SIMD path unavailable: portable path compared with itself");
  if (!mpe::detail::cpu_has_avx512())
    MESSAGE("CPU without AVX-512 F/BW/VL (or built without it): the AVX2 kernel stands in for it");
  SUBCASE("Fp32") { check_format<mpe::Fp32>(); }
  SUBCASE("Fp16") { check_format<mpe::Fp16>(); }
  SUBCASE("Bf16") { check_format<mpe::Bf16>(); }
  SUBCASE("Int8Rowwise") { check_format<mpe::Int8Rowwise>(); }
  SUBCASE("Int4Rowwise") { check_format<mpe::Int4Rowwise>(); }
  SUBCASE("Int2Rowwise") { check_format<mpe::Int2Rowwise>(); }
  SUBCASE("Fp8Rowwise") { check_format<mpe::Fp8E4M3Rowwise>(); }
}

#if MPE_HOST_SIMD
namespace {
/// Whether every 64-byte line that a row of `bytes` bytes at byte offset `off` of `base`
/// touches holds a prefetch point of for_row_lines<Lines>(.., lines, ..), and every point
/// lies inside the row.
template <std::int32_t Lines>
bool points_cover(const std::uint8_t* base, std::size_t off, std::size_t bytes, std::int32_t lines) {
  const std::uint8_t* p = base + off;
  std::vector<bool> hit((off + bytes + 63) / 64 + 1, false);
  bool inside = true;
  mpe::detail::simd::for_row_lines<Lines>(p, lines, bytes - 1, [&](const std::uint8_t* a) {
    inside = inside && a >= p && a < p + bytes;
    const std::size_t line = a >= base ? static_cast<std::size_t>(a - base) / 64 : hit.size();
    if (line < hit.size()) hit[line] = true;  // points elsewhere fail `inside`
  });
  for (std::size_t l = off / 64; l <= (off + bytes - 1) / 64; ++l) {
    if (!hit[l]) return false;
  }
  return inside;
}

/// points_cover with the straight-line copy pooling uses for `lines` points (Lines = lines
/// for 1 .. kUnrolledLines); true beyond that (the run-time loop is checked by the caller).
template <std::int32_t L = mpe::detail::simd::kUnrolledLines>
bool points_cover_unrolled(const std::uint8_t* base, std::size_t off, std::size_t bytes, std::int32_t lines) {
  if constexpr (L == 0) {
    return true;
  } else {
    return lines == L ? points_cover<L>(base, off, bytes, lines)
                      : points_cover_unrolled<L - 1>(base, off, bytes, lines);
  }
}
}  // namespace

TEST_CASE("the prefetch points of a store row cover every line it touches and lie inside it") {
  // Exact enumeration: rows of 1 .. 600 bytes at strides of the row size, of the row size
  // rounded up to 8 bytes (FBGEMM's fused rows) and to 64 bytes, in stores starting at
  // offsets 0 .. 64 of a line, the first 8 rows of each; with the run-time count and with
  // the straight-line copy store-only pooling runs for that count (prefetched_rows_for).
  // The count is checked against its definition by brute force: the most lines a row can
  // touch when it starts at any multiple of g within a line, g the largest power of two
  // (at most 64) dividing the store's address and the stride. The pooling loops themselves
  // are checked for bits by the cases below; a prefetch cannot change them.
  alignas(64) static std::uint8_t buf[64 * 128];
  for (std::size_t bytes = 1; bytes <= 600; ++bytes) {
    for (const std::size_t stride : {bytes, (bytes + 7) / 8 * 8, (bytes + 63) / 64 * 64}) {
      for (std::size_t m = 0; m <= 64; ++m) {
        INFO("bytes ", bytes, " stride ", stride, " store offset ", m);
        const std::int32_t lines = mpe::detail::simd::row_lines(buf + m, stride, bytes);
        std::size_t g = 64;
        while (m % g != 0 || stride % g != 0) g /= 2;
        std::size_t most = 0;
        for (std::size_t o = 0; o < 64; o += g) most = std::max(most, (o + bytes + 63) / 64);
        CHECK(static_cast<std::size_t>(lines) == most);
        for (std::size_t row = 0; row < 8; ++row) {
          const std::size_t off = m + row * stride;
          if (off + bytes > sizeof buf) break;
          CHECK(points_cover<0>(buf, off, bytes, lines));
          CHECK(points_cover_unrolled(buf, off, bytes, lines));
        }
      }
    }
  }
  // The case this count was made for: 72-byte INT8 rows (D = 64) at a 72-byte stride in a
  // line-aligned store touch 2 lines, never 3.
  CHECK(mpe::detail::simd::row_lines(buf, 72, 72) == 2);
}
#endif

// cache_rows = 64: bags mixing cached and store rows (the AVX2 kernel's mixed path);
// cache_rows = 0: store-only bags, which the AVX-512 kernel pools where the CPU has it.
TEST_CASE("forward() and forward_inference() give the same bits with the fast path on and off") {
  const SimdSwitch restore;
  for (const std::int64_t cache_rows : {64, 0}) {
    for (const std::int32_t D : {3, 64, 130}) {
      CAPTURE(cache_rows);
      CAPTURE(D);
      mpe::EmbeddingConfig cfg;
      cfg.table_rows = {500};
      cfg.dim = D;
      cfg.cache_rows = cache_rows;
      cfg.seed = 5;
      mpe::CachedEmbedding<mpe::Fp16, mpe::Lru<8>, mpe::StochasticRounding> e(cfg, mpe::HostBackend{1});
      e.init_uniform(-1.0f, 1.0f);
      std::mt19937 rng(static_cast<std::uint32_t>(D));
      std::vector<std::int64_t> idx(256), off{0};
      for (auto& i : idx) i = static_cast<std::int64_t>(rng() % 500);
      for (int b = 1; b <= 16; ++b) off.push_back(16 * b);
      std::vector<float> a(static_cast<std::size_t>(16 * D)), c(a.size());
      use_kernel(Kernel::Portable);
      e.forward(idx, off, a);
      e.forward_inference(idx, off, c);
      for (const Kernel kernel : {Kernel::Avx2, Kernel::Avx512}) {
        CAPTURE(static_cast<int>(kernel));
        std::vector<float> b(a.size(), -1.0f), d(a.size(), -1.0f);
        use_kernel(kernel);
        if (kernel == Kernel::Avx512 && mpe::detail::cpu_has_avx512())
          CHECK(mpe::detail::host_avx512_enabled());
        e.forward(idx, off, b);  // same batch again: the same cache slots
        e.forward_inference(idx, off, d);
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(c.data(), d.data(), c.size() * sizeof(float)) == 0);
      }
    }
  }
}

namespace {
/// Whether the SIMD kernels cannot run here (a build without the host SIMD path, or a CPU
/// without AVX2 + F16C); says which in the test's log.
bool simd_kernels_missing() {
#if !MPE_HOST_SIMD
  MESSAGE("built without the host SIMD path (MPE_HOST_SIMD = 0); skipped");
  return true;
#else
  if (!mpe::detail::cpu_has_avx2_f16c()) {
    MESSAGE("CPU without AVX2 + F16C (or built without it); skipped");
    return true;
  }
  return false;
#endif
}
}  // namespace

#if MPE_HOST_SIMD
namespace {
/// detail::simd::decode_row<S, Stream> of one row (D <= 130 columns) written `off` floats past
/// a 64-byte aligned buffer, against the Reader element by element in bits: the mismatches,
/// plus one if anything was written outside the row's D floats.
template <class S, bool Stream = false>
int fill_mismatches(const std::uint8_t* row, std::int32_t D, std::size_t off) {
  alignas(64) float buf[130 + 2];
  std::fill(std::begin(buf), std::end(buf), -3.0f);
  mpe::detail::simd::decode_row<S, Stream>(row, D, buf + off);
  if constexpr (Stream) _mm_sfence();
  const typename S::Reader rd(row, D);
  int bad = 0;
  for (std::int32_t d = 0; d < D; ++d) {
    if (mpe::num::float_bits(buf[off + static_cast<std::size_t>(d)]) != mpe::num::float_bits(rd[d])) ++bad;
  }
  if (buf[off + static_cast<std::size_t>(D)] != -3.0f || (off == 1 && buf[0] != -3.0f)) ++bad;
  return bad;
}

/// Store-only bags over `rows` rows of format S (D columns, `stride` bytes apart) through the
/// AVX2 and AVX-512 kernels against the portable loop, in bits: bags of rows r and r + 1 (so
/// accumulators hold what one row's values make of the next: NaN, infinities, both zeros)
/// and one-row bags (simd512::pool_single_rows: add(0, x) turns -0 into +0), plain, weighted
/// and mean.
template <class S>
void compare_kernels_on(const std::vector<std::uint8_t>& store, std::size_t stride, std::int32_t D,
                        std::int64_t rows) {
  const SimdSwitch restore;
  for (const int bag_rows : {2, 1}) {
    CAPTURE(bag_rows);
    std::vector<std::int64_t> global_rows, offsets{0};
    for (std::int64_t r = 0; r + 1 < rows; ++r) {
      global_rows.push_back(r);
      if (bag_rows == 2) global_rows.push_back(r + 1);
      offsets.push_back(static_cast<std::int64_t>(global_rows.size()));
    }
    if (bag_rows == 1) {  // the last row too
      global_rows.push_back(rows - 1);
      offsets.push_back(static_cast<std::int64_t>(global_rows.size()));
    }
    const std::int64_t B = static_cast<std::int64_t>(offsets.size()) - 1;
    std::vector<float> weights(global_rows.size());
    for (std::size_t i = 0; i < weights.size(); ++i)
      weights[i] = i % 3 == 0 ? -1.5f : (i % 3 == 1 ? 0x1p-20f : -0.0f);
    for (const bool weighted : {false, true}) {
      for (const bool mean : {false, true}) {
        if (weighted && mean) continue;
        CAPTURE(weighted);
        CAPTURE(mean);
        std::vector<float> ref(static_cast<std::size_t>(B * D), -1.0f), got(ref.size(), -2.0f);
        for (const Kernel fast : {Kernel::Avx2, Kernel::Avx512}) {
          if (fast == Kernel::Avx512 && !mpe::detail::cpu_has_avx512()) continue;
          CAPTURE(static_cast<int>(fast));
          for (const Kernel kernel : {Kernel::Portable, fast}) {
            use_kernel(kernel);
            const mpe::detail::PoolBags<S, mpe::detail::kPoolLaneGroup, mpe::detail::HostPaths> pb{
                offsets.data(),
                global_rows.data(),
                nullptr,
                weighted ? weights.data() : nullptr,
                mpe::CacheRef{},
                store.data(),
                stride,
                B,
                1,
                D,
                mean,
                kernel == Kernel::Portable ? ref.data() : got.data(),
                nullptr};
            pb.host_range(0, B);
          }
          CHECK(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}
}  // namespace
#endif

// Every FP16 code (NaN and infinity included) through the AVX2 and AVX-512 kernels.
TEST_CASE("AVX2 and AVX-512 pooling of every FP16 code give the portable loop's bits") {
  if (simd_kernels_missing()) return;
#if MPE_HOST_SIMD
  if (!mpe::detail::cpu_has_avx512()) MESSAGE("CPU without AVX-512 F/BW/VL: the AVX2 kernels only");
  const std::int32_t D = 64;
  std::vector<std::uint8_t> store(static_cast<std::size_t>(65536 * 2));
  for (std::uint32_t h = 0; h < 65536; ++h)
    mpe::num::store_u16(store.data() + 2 * h, static_cast<std::uint16_t>(h));
  compare_kernels_on<mpe::Fp16>(store, 2 * static_cast<std::size_t>(D), D, 65536 / D);
#endif
}

// INT4 rows holding every code in every column, with every class of FP16 scale and bias
// (zeros, subnormals, largest finite, infinities, quiet and signalling NaNs with payloads),
// except where the decode's own add would meet two NaNs (a NaN bias with a NaN or infinite
// scale: inf x 0 is NaN), and each followed by a finite row, so no bag adds two NaN rows:
// NaN payloads are not promised where two NaNs meet (docs/numerics.md, section 5). The
// AVX-512 kernel looks each element up in a per-row table of the 16 decoded values and both
// SIMD paths decode scale and bias by vcvtph2ps: pooling (AVX2 and AVX-512 kernels) and the
// cache fill's decode (simd::decode_row, plain and streamed) must give the portable
// Reader's bits whatever the scale and bias.
#if MPE_HOST_SIMD
namespace {
/// Rows of the fused N-bit format S (Int4Rowwise, Int2Rowwise) with every pair of special FP16 scales
/// and biases and every code in every column, pooled by the AVX2 and AVX-512 kernels and
/// decoded by the cache fill, against the portable loop and the Reader.
template <class S>
void check_special_scales(std::initializer_list<std::int32_t> dims) {
  constexpr int Bits = S::bits;
  const std::uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x3c00, 0xbc00, 0x2e66, 0x7bff,
                                    0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe55, 0x7d23};
  const auto is_nan = [](std::uint16_t h) { return (h & 0x7fffu) > 0x7c00u; };
  const auto is_inf = [](std::uint16_t h) { return (h & 0x7fffu) == 0x7c00u; };
  constexpr int per_byte = 8 / Bits, codes = 1 << Bits;
  for (const std::int32_t D : dims) {
    CAPTURE(D);
    const std::size_t stride = mpe::row_bytes<S>(D, 4);
    const std::int32_t nb = (D + per_byte - 1) / per_byte;
    std::vector<std::uint8_t> store;
    std::int64_t rows = 0;
    const auto add_row = [&](std::uint16_t sh, std::uint16_t bh, int shift) {
      store.resize(store.size() + stride, 0);
      std::uint8_t* row = store.data() + static_cast<std::size_t>(rows++) * stride;
      for (std::int32_t d = 0; d < D; ++d) {
        const auto q = static_cast<std::uint32_t>((d + shift) % codes);
        row[d / per_byte] = static_cast<std::uint8_t>(row[d / per_byte] | (q << (Bits * (d % per_byte))));
      }
      mpe::num::store_u16(row + nb, sh);
      mpe::num::store_u16(row + nb + 2, bh);
    };
    for (const std::uint16_t sh : specials) {
      for (const std::uint16_t bh : specials) {
        if (is_nan(bh) && (is_nan(sh) || is_inf(sh))) continue;
        for (int shift = 0; shift < codes; ++shift) {  // every code in every column
          add_row(sh, bh, shift);
          add_row(0x3c00, 0xb800, codes - shift);  // scale 1, bias -0.5: finite
        }
      }
    }
    compare_kernels_on<S>(store, stride, D, rows);
    // The cache fill's decode of every row, plain and streamed (64-byte aligned: the
    // streaming branch), against the Reader.
    int bad = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint8_t* row = store.data() + static_cast<std::size_t>(r) * stride;
      bad += fill_mismatches<S>(row, D, 0) + fill_mismatches<S, true>(row, D, 0);
    }
    CHECK(bad == 0);
  }
}
}  // namespace
#endif

TEST_CASE(
    "AVX2 and AVX-512 pooling of INT4 rows with special scales and biases give the portable loop's bits") {
  if (simd_kernels_missing()) return;
#if MPE_HOST_SIMD
  // 17, 31, 47: odd D, tails of 1, 15 and 15 columns (1, 8 and 8 code bytes); 64 and 65: load64.
  check_special_scales<mpe::Int4Rowwise>({64, 65, 17, 31, 47});
#endif
}

TEST_CASE(
    "AVX2 and AVX-512 pooling of INT2 rows with special scales and biases give the portable loop's bits") {
  if (simd_kernels_missing()) return;
#if MPE_HOST_SIMD
  // 17, 30, 47: tails of 1, 14 and 15 columns (1, 4 and 4 code bytes), D % 4 = 1, 2, 3;
  // 64: full registers only; 8 and 12: the AVX2 kernel's 8-column group plus a Reader tail.
  check_special_scales<mpe::Int2Rowwise>({64, 17, 30, 47, 8, 12});
#endif
}

#if MPE_HOST_SIMD
namespace {
/// detail::simd::decode_row<S, Stream> against the Reader, element by element in bits, over
/// random rows of D = 1 .. 130, written at a 64-byte aligned destination and one float past
/// it (the streamed fill's non-temporal stores need 32-byte alignment: there it takes its
/// streaming branch, one float off its ordinary one).
template <class S, bool Stream = false>
int decode_row_mismatches(std::uint32_t seed) {
  std::mt19937 rng(seed);
  int bad = 0;
  for (std::int32_t D = 1; D <= 130; ++D) {
    const std::size_t stride = mpe::row_bytes<S>(D, 4);
    std::vector<std::uint8_t> row(stride + 32);
    for (int rep = 0; rep < 4; ++rep) {
      random_row<S>(row.data(), D, rng);
      bad += fill_mismatches<S, Stream>(row.data(), D, static_cast<std::size_t>(rep & 1));
    }
  }
  return bad;
}
}  // namespace

TEST_CASE("the cache fill's SIMD decode equals the Reader bit for bit") {
  if (!mpe::detail::cpu_has_avx2_f16c()) {
    MESSAGE("CPU without AVX2 + F16C: the fill uses the Reader; skipped");
    return;
  }
  CHECK(decode_row_mismatches<mpe::Fp32>(11) == 0);
  CHECK(decode_row_mismatches<mpe::Fp16>(12) == 0);
  CHECK(decode_row_mismatches<mpe::Bf16>(13) == 0);
  CHECK(decode_row_mismatches<mpe::Int8Rowwise>(14) == 0);
  CHECK(decode_row_mismatches<mpe::Int4Rowwise>(15) == 0);
  CHECK(decode_row_mismatches<mpe::Int2Rowwise>(16) == 0);
  // The streamed fill (non-temporal stores, AdmitSet::run_fused): the same values.
  CHECK(decode_row_mismatches<mpe::Fp32, true>(21) == 0);
  CHECK(decode_row_mismatches<mpe::Fp16, true>(22) == 0);
  CHECK(decode_row_mismatches<mpe::Bf16, true>(23) == 0);
  CHECK(decode_row_mismatches<mpe::Int8Rowwise, true>(24) == 0);
  CHECK(decode_row_mismatches<mpe::Int4Rowwise, true>(25) == 0);
  CHECK(decode_row_mismatches<mpe::Int2Rowwise, true>(26) == 0);
  // Every FP16 code, NaNs included, in rows of 64.
  std::vector<std::uint8_t> codes(2 * 65536);
  for (std::uint32_t h = 0; h < 65536; ++h)
    mpe::num::store_u16(codes.data() + 2 * h, static_cast<std::uint16_t>(h));
  int bad = 0;
  for (std::uint32_t r = 0; r < 65536 / 64; ++r) {
    float v[64];
    mpe::detail::simd::decode_row<mpe::Fp16>(codes.data() + 128 * r, 64, v);
    for (std::uint32_t k = 0; k < 64; ++k) {
      const auto code = static_cast<std::uint16_t>(64 * r + k);
      if (mpe::num::float_bits(v[k]) != mpe::num::float_bits(mpe::num::half_to_float(code))) ++bad;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("the SIMD tag scan finds what CacheRef::find's loop finds") {
  if (!mpe::detail::cpu_has_avx2_f16c()) {
    MESSAGE("CPU without AVX2: the admission scans tags with the loop; skipped");
    return;
  }
  std::mt19937_64 rng(5);
  int bad = 0, found = 0;
  for (std::int32_t ways : {1, 2, 3, 4, 5, 7, 8, 16, 31, 32, 33, 64, 256}) {
    std::vector<std::int64_t> tags(static_cast<std::size_t>(ways));
    for (int rep = 0; rep < 200; ++rep) {
      // rows from a small range, so hits, misses and empty ways (-1) all occur
      for (auto& t : tags) t = static_cast<std::int64_t>(rng() % 64) - 1;
      const std::int64_t row = static_cast<std::int64_t>(rng() % 64) - (rep % 5 == 0 ? 1 : 0);
      std::int32_t want = -1;
      for (std::int32_t w = 0; w < ways; ++w) {
        if (tags[static_cast<std::size_t>(w)] == row) {
          want = w;
          break;
        }
      }
      found += want >= 0 ? 1 : 0;
      if (mpe::detail::simd::find_tag(tags.data(), ways, row) != want) ++bad;
    }
  }
  CHECK(bad == 0);
  CHECK(found > 100);  // both outcomes were exercised
}
#endif

// HostBackend hands PoolBags ranges of bags (host_range): on 2 threads, 1,203 bags in
// ranges of 150 with a partial last one; the output bits must equal bag-by-bag pooling on
// the portable path, store only and with populate's slots.
TEST_CASE("pooling through HostBackend's ranges on 2 threads equals bag-by-bag pooling") {
  using S = mpe::Int8Rowwise;
  const SimdSwitch restore;
  // D = 16, 64, 128: store-only ranges take simd512::pool_bags_run (a table's bags in one
  // loop, cut at the range's and the table's ends); D = 20 the bag-by-bag kernel.
  for (const std::int32_t D : {16, 20, 64, 128}) {
    std::mt19937 rng(static_cast<std::uint32_t>(D));
    const std::int64_t rows = 500, T = 3, B = 401;
    const std::size_t stride = mpe::row_bytes<S>(D, 4);
    std::vector<std::uint8_t> store;
    std::vector<std::int64_t> offsets, global_rows;
    random_batch<S>(rng, D, rows, T, B, 9, store, offsets, global_rows);
    const auto n = static_cast<std::int64_t>(global_rows.size());
    const std::int64_t sets = 64;
    const std::int32_t ways = 4;
    std::vector<float> crow(static_cast<std::size_t>(sets * ways * D));
    std::uniform_real_distribution<float> cv(-5.0f, 5.0f);
    for (auto& v : crow) v = cv(rng);
    std::vector<std::int64_t> tags(static_cast<std::size_t>(sets * ways), -1);
    std::vector<std::uint64_t> last_use(tags.size(), 0);
    std::vector<std::uint8_t> dirty(tags.size(), 0);
    const mpe::CacheRef cache{crow.data(), tags.data(), last_use.data(), dirty.data(), sets, ways, D};
    std::vector<std::int64_t> slot_of_occ(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {  // rows of table 0 cached where their set has room
      const std::int64_t r = global_rows[static_cast<std::size_t>(i)];
      std::int64_t s = cache.find(r);
      if (s < 0 && r < rows) {
        const std::int64_t base = cache.set_of(r) * ways;
        for (std::int32_t w = 0; w < ways && s < 0; ++w) {
          if (tags[static_cast<std::size_t>(base + w)] < 0) {
            tags[static_cast<std::size_t>(base + w)] = r;
            s = base + w;
          }
        }
      }
      slot_of_occ[static_cast<std::size_t>(i)] = s;
    }
    for (const bool cached : {false, true}) {
      CAPTURE(D);
      CAPTURE(cached);
      auto pool = [&](std::vector<float>& out) {
        return mpe::detail::PoolBags<S, mpe::detail::kPoolLaneGroup, mpe::detail::HostPaths>{
            offsets.data(),
            global_rows.data(),
            cached ? slot_of_occ.data() : nullptr,
            nullptr,
            cached ? cache : mpe::CacheRef{},
            store.data(),
            stride,
            B,
            T,
            D,
            false,
            out.data(),
            nullptr};
      };
      std::vector<float> ref(static_cast<std::size_t>(B * T * D), -1.0f), got(ref.size(), -2.0f);
      mpe::detail::set_host_simd(false);
      const auto portable = pool(ref);
      for (std::int64_t j = 0; j < T * B; ++j) portable(j);
      mpe::detail::set_host_simd(true);
      mpe::HostBackend be;
      be.num_threads = 2;
      be.for_each_lanes(T * B, pool(got));
      CHECK(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)) == 0);
    }
  }
}
