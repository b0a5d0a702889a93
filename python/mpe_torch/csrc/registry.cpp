// SPDX-License-Identifier: Apache-2.0
// mpe_torch: the CPU module's registry: which combinations are built (variants.hpp,
// is_built), name -> type dispatch over the variant lists (registry.hpp) and planned_memory.
#include "registry.hpp"

#include <stdexcept>

namespace mpe_torch {

namespace {

/// planned_memory of one built combination (static: nothing is built).
template <class S, class C, class R, class P>
mpe::MemoryFootprint planned_memory_of(const mpe::MixedDimConfig& cfg, int optimizer) {
  mpe::MemoryFootprint m;
  bool done = false;
  visit_index(Optimizers{}, optimizer, [&]<class O>() {
    m = mpe::MixedDimEmbedding<S, C, R, P>::planned_memory(
        cfg, [](std::int32_t D) { return mpe::OptimizerRule<O>::state_floats(D); });
    done = true;
  });
  if (!done) throw std::invalid_argument("mpe_torch: unknown optimizer index " + std::to_string(optimizer));
  return m;
}

}  // namespace

std::vector<std::string> built_combinations() { return registry::combinations<HostVariants>(); }

std::unique_ptr<Group> make_group(const PolicyNames& n, const mpe::MixedDimConfig& cfg) {
  return registry::dispatch<HostVariants>(n, [&]<class S, class C>() { return make_group_of<S, C>(n, cfg); });
}

mpe::MemoryFootprint planned_memory(const PolicyNames& n, const mpe::MixedDimConfig& cfg, int optimizer) {
  registry::check_names(n);
  bool found = false;
  mpe::MemoryFootprint m;
  for_each_type(Storages{}, [&]<class S>() {
    for_each_type(Caches{}, [&]<class C>() {
      for_each_type(Roundings{}, [&]<class R>() {
        for_each_type(StatePrecisions{}, [&]<class P>() {
          if constexpr (is_built<S, C, R, P>())
            if (!found && py_name<S>() == n.storage && py_name<C>() == n.cache &&
                py_name<R>() == n.rounding && py_name<P>() == n.state_precision) {
              found = true;
              m = planned_memory_of<S, C, R, P>(cfg, optimizer);
            }
        });
      });
    });
  });
  if (!found) registry::not_built(n, built_combinations());
  return m;
}

}  // namespace mpe_torch
