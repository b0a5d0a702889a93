// SPDX-License-Identifier: Apache-2.0
// One Storage x CachePolicy x Rounding combination as a type, for doctest's typed tests.
#pragma once

namespace ref {

template <class S, class C, class R>
struct Policy {
  using storage = S;
  using cache = C;
  using rounding = R;
};

}  // namespace ref
