// SPDX-License-Identifier: Apache-2.0
// mpe_torch: name -> type dispatch over the variant lists (variants.hpp), which combinations
// are built, and the optimizer hyperparameter checks.
#include <stdexcept>

#include "group.hpp"

namespace mpe_torch {

namespace {

std::string join(const std::vector<std::string>& v, bool quote) {
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
void check_names(const PolicyNames& n) {
  check_name("storage", n.storage, Storages{});
  check_name("cache", n.cache, Caches{});  // "none" arrives as NoCache's name
  check_name("rounding", n.rounding, Roundings{});
  check_name("state_precision", n.state_precision, StatePrecisions{});
}

[[noreturn]] void not_built(const PolicyNames& n) {
  throw std::invalid_argument("mpe_torch: storage/cache/rounding/state_precision = " + n.storage + "/" +
                              n.cache + "/" + n.rounding + "/" + n.state_precision +
                              " is not built; built: " + join(built_combinations(), false));
}

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

std::vector<std::string> built_combinations() {
  std::vector<std::string> out;
  for_each_type(Storages{}, [&]<class S>() {
    for_each_type(Caches{}, [&]<class C>() {
      for_each_type(Roundings{}, [&]<class R>() {
        for_each_type(StatePrecisions{}, [&]<class P>() {
          if constexpr (is_built<S, C, R, P>()) {
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

std::unique_ptr<Group> make_group(const PolicyNames& n, const mpe::MixedDimConfig& cfg) {
  check_names(n);
  std::unique_ptr<Group> g;
  for_each_type(Storages{}, [&]<class S>() {
    for_each_type(Caches{}, [&]<class C>() {
      if constexpr (any_built<S, C>())
        if (!g && py_name<S>() == n.storage && py_name<C>() == n.cache) g = make_group_of<S, C>(n, cfg);
    });
  });
  if (!g) not_built(n);
  return g;
}

mpe::MemoryFootprint planned_memory(const PolicyNames& n, const mpe::MixedDimConfig& cfg, int optimizer) {
  check_names(n);
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
  if (!found) not_built(n);
  return m;
}

std::string check_optimizer(const OptSpec& o) {
  std::string why = "unknown optimizer index " + std::to_string(o.optimizer);
  visit_index(Optimizers{}, o.optimizer,
              [&]<class O>() { why = mpe::OptimizerRule<O>::check(make_optimizer<O>(o)); });
  return why;
}

}  // namespace mpe_torch
