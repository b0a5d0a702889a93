// SPDX-License-Identifier: Apache-2.0
// mpe_torch: the type-erased interface over one mpe::MixedDimEmbedding instantiation.
// No torch headers here, so the instantiation translation units (group_<storage>.cpp)
// compile without them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mpe/embedding/mixed_dim_embedding.hpp>
#include <span>
#include <string>
#include <vector>

namespace mpe_torch {

/// Optimizer chosen by name at construction; hyperparameters may change per step.
enum class OptKind { Sgd, RowwiseAdagrad, Adagrad, Adam };

struct OptSpec {
  OptKind kind = OptKind::Sgd;
  float learning_rate = 0.01f;
  float eps = 1e-8f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
};

/// Returns mpe's message for unusable hyperparameters (OptimizerRule<Opt>::check), or "".
std::string check_optimizer(const OptSpec& o);

/// FBGEMM / TorchRec row layouts of mpe::interop.
enum class Layout { Fused, TbeInference };
/// Row format of an export: the store's own, or a converting export.
enum class Target { Same, Fp32, Fp16, Int8, Int4 };

struct LayoutSpec {
  Layout layout = Layout::Fused;
  std::int32_t alignment = 1;    // Fused: INT8 code alignment; TbeInference: row alignment
  bool scale_bias_last = false;  // TbeInference only
};

/// One mpe::MixedDimEmbedding<Storage, Cache, Rounding> (all T tables, any mix of D),
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
                                                 Target target) = 0;
  virtual std::size_t export_row_bytes(std::int64_t table, const LayoutSpec& layout, Target target) const = 0;
  virtual std::int64_t import_table(std::int64_t table, const LayoutSpec& layout,
                                    std::span<const std::uint8_t> bytes) = 0;
  virtual void get_weights(std::int64_t table, std::span<float> out) const = 0;
  virtual void set_weights(std::int64_t table, std::span<const float> w) = 0;
  virtual void init_uniform(float low, float high) = 0;
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

/// Policy names as the Python API spells them.
struct PolicyNames {
  std::string storage;   // fp32 | fp16 | int8 | int4
  std::string cache;     // lru (cache_rows = 0: none)
  std::string rounding;  // stochastic | nearest
};

/// The combinations compiled into this build, as "storage/cache/rounding".
std::vector<std::string> built_combinations();

/// Builds the object, or throws std::invalid_argument listing the built combinations.
std::unique_ptr<Group> make_group(const PolicyNames& names, const mpe::MixedDimConfig& cfg);

// One factory per storage format, each in its own translation unit (group_<storage>.cpp).
// They return nullptr for a cache/rounding not built.
std::unique_ptr<Group> make_group_fp32(const PolicyNames&, const mpe::MixedDimConfig&);
std::unique_ptr<Group> make_group_fp16(const PolicyNames&, const mpe::MixedDimConfig&);
std::unique_ptr<Group> make_group_int8(const PolicyNames&, const mpe::MixedDimConfig&);
std::unique_ptr<Group> make_group_int4(const PolicyNames&, const mpe::MixedDimConfig&);

}  // namespace mpe_torch
