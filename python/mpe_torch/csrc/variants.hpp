// SPDX-License-Identifier: Apache-2.0
// mpe_torch: the variant lists the binding dispatches on, one type list per policy family,
// each variant named by the library's own `name` (the Python API's spelling drops a
// "_rowwise" suffix: int8_rowwise -> "int8", fp8_e4m3_rowwise -> "fp8_e4m3"). The names the
// module accepts, the messages listing them and the name -> type dispatch all come from these
// lists; `is_built` says which combinations are compiled. No torch headers here.
#pragma once

#include <cstddef>
#include <mpe/embedding/mixed_dim_embedding.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace mpe_torch {

template <class... Ts>
struct TypeList {};

// The library's own lists of each family, as TypeLists.
template <class L>
struct AsTypeList;
template <template <class...> class List, class... Ts>
struct AsTypeList<List<Ts...>> {
  using type = TypeList<Ts...>;
};

/// Storage formats: mpe::KnownStorages (include/mpe/storage/all.hpp).
using Storages = typename AsTypeList<mpe::KnownStorages>::type;
/// Cache replacement policies: mpe::KnownCachePolicies<32> (include/mpe/cache/all.hpp), 32 ways
/// (FBGEMM's) where the policy has ways. The Python API adds "none": Lru<32> with no cache rows.
using Caches = typename AsTypeList<mpe::KnownCachePolicies<32>>::type;
/// The Python API's cache "none": this policy with no cache rows (MixedDimConfig::cache_fraction 0).
using NoCache = mpe::Lru<32>;
inline constexpr std::string_view kNoCacheName = "none";
/// Rounding of every write to the store: mpe::KnownRoundings (include/mpe/numeric/rounding.hpp).
using Roundings = typename AsTypeList<mpe::KnownRoundings>::type;
/// Optimizer-state precisions: mpe::KnownStatePrecisions (include/mpe/optim/state_precision.hpp).
using StatePrecisions = typename AsTypeList<mpe::KnownStatePrecisions>::type;
/// Optimizers: mpe's registry, the ones a checkpoint can name (include/mpe/optim/all.hpp).
using Optimizers = typename AsTypeList<mpe::KnownOptimizers>::type;

/// Row formats with an FBGEMM / TorchRec layout of mpe::interop (include/mpe/io/interop.hpp):
/// the targets of a converting export. FP8 has none.
using ExportFormats =
    TypeList<mpe::Fp32, mpe::Fp16, mpe::Bf16, mpe::Int8Rowwise, mpe::Int4Rowwise, mpe::Int2Rowwise>;
template <class T, class L>
inline constexpr bool in_list = false;
template <class T, class... Ts>
inline constexpr bool in_list<T, TypeList<Ts...>> = (std::is_same_v<T, Ts> || ...);
/// Formats of interop::FbgemmFused rows (the export formats) and of interop::TbeInference rows
/// (the same but BF16).
template <class T>
inline constexpr bool has_fused_layout = in_list<T, ExportFormats>;
template <class T>
inline constexpr bool has_tbe_layout = has_fused_layout<T> && !std::is_same_v<T, mpe::Bf16>;

/// The name of a variant as the Python API spells it: the library's own name (an optimizer's
/// OptimizerRule<O>::name), less a "_rowwise" suffix.
template <class T>
constexpr std::string_view py_name() {
  std::string_view n;
  if constexpr (requires { T::name; })
    n = T::name;
  else
    n = mpe::OptimizerRule<T>::name;
  constexpr std::string_view suffix = "_rowwise";
  if (n.ends_with(suffix)) n.remove_suffix(suffix.size());
  return n;
}

/// Calls f.template operator()<T>() for each T of the list, in order.
template <class... Ts, class F>
constexpr void for_each_type(TypeList<Ts...>, F&& f) {
  (f.template operator()<Ts>(), ...);
}

template <class... Ts>
std::vector<std::string> names(TypeList<Ts...>) {
  return {std::string(py_name<Ts>())...};
}

/// Position of `name` in the list, or -1.
template <class... Ts>
int index_of(TypeList<Ts...> l, std::string_view name) {
  int i = 0, found = -1;
  for_each_type(l, [&]<class T>() {
    if (found < 0 && py_name<T>() == name) found = i;
    ++i;
  });
  return found;
}

/// Calls f.template operator()<T>() for the list's type at `index` (nothing when out of range).
template <class... Ts, class F>
void visit_index(TypeList<Ts...> l, int index, F&& f) {
  int i = 0;
  for_each_type(l, [&]<class T>() {
    if (i++ == index) f.template operator()<T>();
  });
}

/// Which storage/cache/rounding/state-precision combinations are compiled (each is one
/// MixedDimEmbedding instantiation, ~15 s of CPU): every storage format x every rounding with
/// the default cache (Lru<32>) and state (FP32); and, for FP32 and INT8 storage with stochastic
/// rounding, every other cache policy (FP32 state) and every other state precision (Lru<32>).
/// Widen it here; registry.cpp and the group_<storage>*.cpp files follow (a combination
/// allowed here needs its (storage, cache) instantiated in one of them: an import of the
/// module without it fails naming the missing symbol).
template <class S, class C, class R, class P>
consteval bool is_built() {
  constexpr bool default_cache = std::is_same_v<C, mpe::Lru<32>>;
  constexpr bool default_state = std::is_same_v<P, mpe::StateFp32>;
  if (default_cache && default_state) return true;
  constexpr bool wide = std::is_same_v<S, mpe::Fp32> || std::is_same_v<S, mpe::Int8Rowwise>;
  return wide && std::is_same_v<R, mpe::StochasticRounding> && (default_cache || default_state);
}

/// Which combinations the CUDA module (mpe_torch._C_cuda, MixedDimEmbedding over
/// mpe::CudaBackend) compiles: FP32, FP16, INT8 and INT4 storage with cache Lru<32> (and
/// "none"), stochastic rounding, FP32 state. A deliberate subset of is_built (checked below),
/// sized so that nvcc's share of CI's build stays within a few minutes on 2 cores (each is one
/// nvcc translation unit, cuda_group_<storage>.cu; python/README.md). Widen it here and add
/// the (storage, cache) line to a cuda_group_<storage>.cu file.
template <class S, class C, class R, class P>
consteval bool is_built_cuda() {
  constexpr bool storage = std::is_same_v<S, mpe::Fp32> || std::is_same_v<S, mpe::Fp16> ||
                           std::is_same_v<S, mpe::Int8Rowwise> || std::is_same_v<S, mpe::Int4Rowwise>;
  return storage && std::is_same_v<C, mpe::Lru<32>> && std::is_same_v<R, mpe::StochasticRounding> &&
         std::is_same_v<P, mpe::StateFp32>;
}

/// The combinations a build of the module compiles: is_built (the CPU module, mpe_torch._C)
/// or is_built_cuda (the CUDA module, mpe_torch._C_cuda), as a type the registry dispatches on.
struct HostVariants {
  template <class S, class C, class R, class P>
  static consteval bool built() {
    return is_built<S, C, R, P>();
  }
};
struct CudaVariants {
  template <class S, class C, class R, class P>
  static consteval bool built() {
    return is_built_cuda<S, C, R, P>();
  }
};

/// Whether any rounding/state precision is built with storage S and cache C (in V's set).
template <class S, class C, class V = HostVariants>
consteval bool any_built() {
  bool any = false;
  for_each_type(Roundings{}, [&]<class R>() {
    for_each_type(StatePrecisions{}, [&]<class P>() { any = any || V::template built<S, C, R, P>(); });
  });
  return any;
}

/// Every CUDA combination is a CPU one too: a state_dict saved on the GPU loads into a CPU
/// module of the same options, and FBGEMM exports of a CUDA module run on a CPU copy.
consteval bool cuda_subset_of_host() {
  bool ok = true;
  for_each_type(Storages{}, [&]<class S>() {
    for_each_type(Caches{}, [&]<class C>() {
      for_each_type(Roundings{}, [&]<class R>() {
        for_each_type(StatePrecisions{}, [&]<class P>() {
          ok = ok && (!is_built_cuda<S, C, R, P>() || is_built<S, C, R, P>());
        });
      });
    });
  });
  return ok;
}
static_assert(cuda_subset_of_host(), "mpe_torch: is_built_cuda must allow only combinations is_built allows");

}  // namespace mpe_torch
