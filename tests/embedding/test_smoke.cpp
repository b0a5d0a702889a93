// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <mpe/mpe.hpp>

TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors") {
  using mpe::num::philox4x32_10;
  auto a = philox4x32_10({0, 0, 0, 0}, 0, 0);
  CHECK(a.x == 0x6627e8d5u);
  CHECK(a.y == 0xe169c58du);
  CHECK(a.z == 0xbc57ac4cu);
  CHECK(a.w == 0x9b00dbd8u);
  auto b = philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu);
  CHECK(b.x == 0x408f276du);
  CHECK(b.y == 0x41c83b0eu);
  CHECK(b.z == 0xa20bc7c6u);
  CHECK(b.w == 0x6d5451fdu);
  auto c = philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u, 0x299f31d0u);
  CHECK(c.x == 0xd16cfe09u);
  CHECK(c.y == 0x94fdccebu);
  CHECK(c.z == 0x5001e420u);
  CHECK(c.w == 0x24126ea1u);
}
