// SPDX-License-Identifier: Apache-2.0
// mpe_torch: the type-erased interface over one mpe::MixedDimEmbedding instantiation.
// No torch headers here, so the instantiation translation units (group_<storage>*.cpp)
// compile without them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mpe/embedding/mixed_dim_embedding.hpp>
#include <span>
#include <string>
#include <vector>

#include "variants.hpp"

namespace mpe_torch {

/// Optimizer chosen by name at construction (its index in `Optimizers`); hyperparameters may
/// change per step. Each optimizer takes the fields it has (learning_rate, eps, beta1, beta2).
struct OptSpec {
  int optimizer = 0;
  float learning_rate = 0.01f;
  float eps = 1e-8f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
};

/// The optimizer value of type O for the hyperparameters of `s` (the fields O has).
template <class O>
O make_optimizer(const OptSpec& s) {
  O o{};
  o.learning_rate = s.learning_rate;
  if constexpr (requires { o.eps; }) o.eps = s.eps;
  if constexpr (requires { o.beta1; }) o.beta1 = s.beta1;
  if constexpr (requires { o.beta2; }) o.beta2 = s.beta2;
  return o;
}

/// Returns mpe's message for unusable hyperparameters (OptimizerRule<Opt>::check), or "".
inline std::string check_optimizer(const OptSpec& o) {
  std::string why = "unknown optimizer index " + std::to_string(o.optimizer);
  visit_index(Optimizers{}, o.optimizer,
              [&]<class O>() { why = mpe::OptimizerRule<O>::check(make_optimizer<O>(o)); });
  return why;
}

/// FBGEMM / TorchRec row layouts of mpe::interop.
enum class Layout { Fused, TbeInference };
/// Row format of an export: the store's own (kSameFormat), or the index of a converting
/// export's format in `ExportFormats`.
inline constexpr int kSameFormat = -1;

struct LayoutSpec {
  Layout layout = Layout::Fused;
  std::int32_t alignment = 1;    // Fused: INT8 code alignment; TbeInference: row alignment
  bool scale_bias_last = false;  // TbeInference only
};

/// One mpe::MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision> (all T tables, any mix of D),
/// type-erased. Table indices are the module's (spec order).
class Group {
 public:
  virtual ~Group() = default;
  virtual void forward(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                       std::span<float> out, mpe::Pooling pooling, std::span<const float> psw) = 0;
  virtual void forward_inference(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                                 std::span<float> out, mpe::Pooling pooling,
                                 std::span<const float> psw) const = 0;
  virtual void backward(std::span<const float> grad_output, const OptSpec& opt) = 0;
  /// The exact state, mpe's MPEMIXD1 checkpoint bytes (MixedDimEmbedding::save_bytes).
  virtual std::vector<std::uint8_t> save_bytes() const = 0;
  /// Verifies all of `bytes` and only then replaces the state (MixedDimEmbedding::load_bytes).
  virtual void load_bytes(std::span<const std::uint8_t> bytes) = 0;
  virtual std::vector<std::uint8_t> export_table(std::int64_t table, const LayoutSpec& layout,
                                                 int target) = 0;
  virtual std::size_t export_row_bytes(std::int64_t table, const LayoutSpec& layout, int target) const = 0;
  virtual std::int64_t import_table(std::int64_t table, const LayoutSpec& layout,
                                    std::span<const std::uint8_t> bytes) = 0;
  /// Rows [first_row, first_row + out.size() / D) of `table` (MixedDimEmbedding::get_weights).
  virtual void get_weights(std::int64_t table, std::span<float> out, std::int64_t first_row) const = 0;
  /// Writes rows from first_row on (MixedDimEmbedding::set_weights: the rows' optimizer state is kept).
  virtual void set_weights(std::int64_t table, std::span<const float> w, std::int64_t first_row) = 0;
  virtual void init_uniform(float low, float high) = 0;
  /// A range per table (MixedDimEmbedding::init_uniform(span, span)).
  virtual void init_uniform_tables(std::span<const float> low, std::span<const float> high) = 0;
  virtual void flush() = 0;
  virtual mpe::CacheStats stats() const = 0;
  virtual void reset_stats() = 0;
  virtual mpe::MemoryFootprint memory() const = 0;
  virtual std::uint64_t step() const = 0;
  virtual std::int64_t total_dim() const = 0;
  // The D-groups of the MixedDimEmbedding.
  virtual std::size_t num_groups() const = 0;
  virtual std::int32_t group_dim(std::size_t g) const = 0;
  virtual std::vector<std::int64_t> group_tables(std::size_t g) const = 0;
  virtual std::int64_t group_cache_slots(std::size_t g) const = 0;
  virtual std::uint64_t group_seed(std::size_t g) const = 0;
  virtual mpe::CacheStats group_stats(std::size_t g) const = 0;
  virtual mpe::MemoryFootprint group_memory(std::size_t g) const = 0;
  virtual std::string type_name() const = 0;
};

/// Policy names as the Python API spells them (py_name of the variant lists).
struct PolicyNames {
  std::string storage;          // Storages
  std::string cache;            // Caches ("none" arrives here as "lru" with no cache rows)
  std::string rounding;         // Roundings
  std::string state_precision;  // StatePrecisions
};

/// The combinations compiled into this build, as "storage/cache/rounding/state_precision".
std::vector<std::string> built_combinations();

/// Builds the object, or throws std::invalid_argument naming the valid names (an unknown
/// name) or listing the built combinations (a combination not built).
std::unique_ptr<Group> make_group(const PolicyNames& names, const mpe::MixedDimConfig& cfg);

/// The bytes MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision>::planned_memory gives
/// for `cfg` with the optimizer at index `optimizer` of `Optimizers` (its state values per row,
/// OptimizerRule::state_floats(D) per D-group): what memory() of make_group(names, cfg) reports
/// after one training step, workspace 0. Nothing is built or allocated. Throws what make_group
/// throws for the names (unknown, not built) and for `cfg` (mpe's messages, naming planned_memory).
mpe::MemoryFootprint planned_memory(const PolicyNames& names, const mpe::MixedDimConfig& cfg, int optimizer);

/// The factory of storage S with cache C (the roundings and state precisions `is_built` allows;
/// nullptr for another). Defined in group_impl.hpp and instantiated explicitly by the
/// group_<storage>*.cpp translation units, one per storage format (the other cache policies
/// of FP32 and INT8 in their own), so they compile in parallel.
template <class S, class C>
std::unique_ptr<Group> make_group_of(const PolicyNames& names, const mpe::MixedDimConfig& cfg);

}  // namespace mpe_torch
