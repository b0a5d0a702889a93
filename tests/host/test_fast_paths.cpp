// SPDX-License-Identifier: Apache-2.0
// Which storage formats have host fast paths, written down (#37): adding a format to the
// storage list (tests/reference/policy_lists.hpp) without a row here fails this test, so a
// format that takes the generic Reader loops does so by a visible choice. The fast paths and
// the files that hold them (docs/extending.md, "A storage format"):
//   avx2     simd::Row<S> / simd::has_row<S>     include/mpe/detail/host/common/decode8.hpp
//   avx512   avx512::Row<S> (same formats)        include/mpe/detail/host/avx512/pool.hpp
//   accum    RowAccumulate<S> specialization     include/mpe/detail/kernels/row_accumulate.hpp
//   chunk    decode_chunk's one-load chunk       include/mpe/detail/kernels/row_accumulate.hpp
//   lanes    S::store_lanes (LanedStore)         include/mpe/storage/<format>.hpp
// Every fast path gives the generic path's bits: tests/host/test_pool_simd.cpp,
// tests/embedding/test_pool_bits.cpp and tests/embedding/test_gradient_sum.cpp check that.
#include <doctest/doctest.h>

#include <string>
#include <tuple>

#include "mpe/mpe.hpp"
#include "reference/policy_lists.hpp"

namespace {

struct FastPaths {
  const char* name;
  bool avx2_avx512;  // a SIMD row decoder for host pooling, fills and write-backs
  bool accumulate;   // RowAccumulate's own loop (portable and device pooling)
  bool chunk_load;   // decode_chunk's one-load chunk (laned pooling)
  bool store_lanes;  // Storage::store_lanes (laned store updates and write-backs)
};

// clang-format off
constexpr FastPaths kExpected[] = {
  //  name               avx2/512 accum  chunk  lanes
    {"fp32",             true,    true,  false, true},
    {"fp16",             true,    false, false, true},
    {"bf16",             true,    false, false, true},
    {"int8_rowwise",     true,    true,  true,  true},
    {"int4_rowwise",     true,    true,  false, true},
    {"int2_rowwise",     true,    true,  false, true},
    {"fp8_e4m3_rowwise", false,   false, false, true},
    {"fp8_e5m2_rowwise", false,   false, false, true},
};
// clang-format on

template <class S>
FastPaths actual() {
#if MPE_HOST_SIMD
  constexpr bool simd = mpe::detail::simd::has_row<S>;
#else
  constexpr bool simd = false;
#endif
  return {S::name, simd, mpe::detail::has_row_accumulate<S>, mpe::detail::has_chunk_load<S>,
          mpe::LanedStore<S>};
}

}  // namespace

TEST_CASE("every storage format's host fast paths are the listed ones") {
  int listed = 0;
  std::apply(
      [&](auto... s) {
        (
            [&](auto tag) {
              using S = decltype(tag);
              const FastPaths a = actual<S>();
              const FastPaths* e = nullptr;
              for (const FastPaths& row : kExpected)
                if (std::string(row.name) == a.name) e = &row;
              INFO("format "
                   << a.name
                   << ": add a row to kExpected (and docs/extending.md) saying which fast paths it has");
              REQUIRE(e != nullptr);
              ++listed;
#if MPE_HOST_SIMD
              CHECK(a.avx2_avx512 == e->avx2_avx512);
#endif
              CHECK(a.accumulate == e->accumulate);
              CHECK(a.chunk_load == e->chunk_load);
              CHECK(a.store_lanes == e->store_lanes);
            }(s),
            ...);
      },
      mpe_test::Storages{});
  CHECK(listed == static_cast<int>(std::size(kExpected)));
}
