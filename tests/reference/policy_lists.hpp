// SPDX-License-Identifier: Apache-2.0
// The one list of policy types the tests instantiate. A new storage format, cache policy,
// rounding or optimizer is added here (and registered in the library); every suite that
// takes its types from these lists then covers it.
//
//   TEST_CASE_TEMPLATE_DEFINE("...", T, my_id) { ... }
//   TEST_CASE_TEMPLATE_APPLY(my_id, mpe_test::product_t<Combo, mpe_test::Storages, mpe_test::Caches>);
#pragma once

#include <mpe/mpe.hpp>
#include <tuple>

namespace mpe_test {

/// Every storage format (`StoragePolicy`), FP32 first.
using Storages = std::tuple<mpe::Fp32, mpe::Fp16, mpe::Bf16, mpe::Int8Rowwise, mpe::Int4Rowwise,
                            mpe::Int2Rowwise, mpe::Fp8E4M3Rowwise, mpe::Fp8E5M2Rowwise>;
/// Every cache policy (`CachePolicy`), at 4 ways where the policy has a way count.
using Caches =
    std::tuple<mpe::Lru<4>, mpe::Lfu<4>, mpe::DirectMapped, mpe::WTinyLfu<4>, mpe::SecondTouchLru<4>>;
/// Both rounding policies.
using Roundings = std::tuple<mpe::StochasticRounding, mpe::NearestRounding>;
/// Every optimizer registered in mpe::KnownOptimizers.
using Optimizers = std::tuple<mpe::Sgd, mpe::RowwiseAdagrad, mpe::Adagrad, mpe::Adam>;

namespace detail {
template <class... Tuples>
struct Cat;
template <>
struct Cat<> {
  using type = std::tuple<>;
};
template <class... A>
struct Cat<std::tuple<A...>> {
  using type = std::tuple<A...>;
};
template <class... A, class... B, class... Rest>
struct Cat<std::tuple<A...>, std::tuple<B...>, Rest...> {
  using type = typename Cat<std::tuple<A..., B...>, Rest...>::type;
};

// Product<F, Prefix, Lists...>: F<Prefix..., one type of each list> for every combination.
template <template <class...> class F, class Prefix, class... Lists>
struct Product;
template <template <class...> class F, class... P>
struct Product<F, std::tuple<P...>> {
  using type = std::tuple<F<P...>>;
};
template <template <class...> class F, class... P, class... Heads, class... Rest>
struct Product<F, std::tuple<P...>, std::tuple<Heads...>, Rest...> {
  using type = typename Cat<typename Product<F, std::tuple<P..., Heads>, Rest...>::type...>::type;
};
}  // namespace detail

/// std::tuple of F<A, B, ...> for every combination of one type from each list, in list
/// order (the last list varies fastest).
template <template <class...> class F, class... Lists>
using product_t = typename detail::Product<F, std::tuple<>, Lists...>::type;

/// The types of a tuple without those for which Pred<T>::value is false.
template <template <class> class Pred, class Tuple>
struct filter;
template <template <class> class Pred, class... T>
struct filter<Pred, std::tuple<T...>> {
  using type = typename detail::Cat<std::conditional_t<Pred<T>::value, std::tuple<T>, std::tuple<>>...>::type;
};
/// See filter.
template <template <class> class Pred, class Tuple>
using filter_t = typename filter<Pred, Tuple>::type;

}  // namespace mpe_test
