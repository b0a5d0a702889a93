// SPDX-License-Identifier: Apache-2.0
// mpe_torch: the name checks and the name -> (storage, cache) dispatch shared by the CPU
// module's registry (registry.cpp) and the CUDA module's (cuda_registry.cpp), each over its
// own set of built combinations (variants.hpp: HostVariants, CudaVariants). No torch headers.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "group.hpp"

namespace mpe_torch::registry {

inline std::string join(const std::vector<std::string>& v, bool quote) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + (quote ? "'" + s + "'" : s);
  return out;
}

template <class L>
void check_name(const char* what, const std::string& name, L list) {
  if (index_of(list, name) < 0)
    throw std::invalid_argument(std::string("mpe_torch: ") + what + " = '" + name + "' is not one of " +
                                join(names(list), true));
}

/// The checks of every name, in make_group's order.
inline void check_names(const PolicyNames& n) {
  check_name("storage", n.storage, Storages{});
  check_name("cache", n.cache, Caches{});  // "none" arrives as NoCache's name
  check_name("rounding", n.rounding, Roundings{});
  check_name("state_precision", n.state_precision, StatePrecisions{});
}

/// The combinations V builds, as "storage/cache/rounding/state_precision" (cache "none" listed
/// before NoCache's own name).
template <class V>
std::vector<std::string> combinations() {
  std::vector<std::string> out;
  for_each_type(Storages{}, [&]<class S>() {
    for_each_type(Caches{}, [&]<class C>() {
      for_each_type(Roundings{}, [&]<class R>() {
        for_each_type(StatePrecisions{}, [&]<class P>() {
          if constexpr (V::template built<S, C, R, P>()) {
            const std::string rest = "/" + std::string(py_name<R>()) + "/" + std::string(py_name<P>());
            if constexpr (std::is_same_v<C, NoCache>)
              out.push_back(std::string(py_name<S>()) + "/" + std::string(kNoCacheName) + rest);
            out.push_back(std::string(py_name<S>()) + "/" + std::string(py_name<C>()) + rest);
          }
        });
      });
    });
  });
  return out;
}

/// std::invalid_argument naming the combination asked for and listing `built`.
[[noreturn]] inline void not_built(const PolicyNames& n, const std::vector<std::string>& built) {
  throw std::invalid_argument("mpe_torch: storage/cache/rounding/state_precision = " + n.storage + "/" +
                              n.cache + "/" + n.rounding + "/" + n.state_precision +
                              " is not built; built: " + join(built, false));
}

/// Checks the names, then returns make.template operator()<S, C>() for the storage and cache
/// of `n` where V builds any combination of them (the factory returns nullptr for a rounding
/// or state precision V does not build); throws what check_names throws, or not_built.
template <class V, class Make>
std::unique_ptr<Group> dispatch(const PolicyNames& n, Make&& make) {
  check_names(n);
  std::unique_ptr<Group> g;
  for_each_type(Storages{}, [&]<class S>() {
    for_each_type(Caches{}, [&]<class C>() {
      if constexpr (any_built<S, C, V>())
        if (!g && py_name<S>() == n.storage && py_name<C>() == n.cache) g = make.template operator()<S, C>();
    });
  });
  if (!g) not_built(n, combinations<V>());
  return g;
}

}  // namespace mpe_torch::registry
