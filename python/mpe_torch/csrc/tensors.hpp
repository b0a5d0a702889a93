// SPDX-License-Identifier: Apache-2.0
// Tensor argument checks and views shared by mpe_torch's bindings (binding.cpp,
// tiered_binding.cpp): messages name the Python class, method, argument and value.
#pragma once

#include <torch/extension.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace mpe_torch {

namespace py = pybind11;

/// The dtype as Python spells it (torch.int64, not c10's "Long").
inline std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kLong:
      return "torch.int64";
    case at::kInt:
      return "torch.int32";
    case at::kShort:
      return "torch.int16";
    case at::kChar:
      return "torch.int8";
    case at::kByte:
      return "torch.uint8";
    case at::kBool:
      return "torch.bool";
    case at::kFloat:
      return "torch.float32";
    case at::kDouble:
      return "torch.float64";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    default:
      return std::string("torch.") + c10::toString(t);
  }
}

/// A tensor's shape as Python prints a tuple: "(3, 4)", "(5,)".
inline std::string shape_str(const at::Tensor& t) {
  std::string s = "(";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + (t.dim() == 1 ? ",)" : ")");
}

/// Refuses (never converts) a tensor that is not a contiguous tensor on `device` of `dtype`
/// with `dims` dimensions: argument `name` of mpe_torch.`cls`.`fn`, named so in the message
/// (TypeError for the dtype, ValueError otherwise).
inline void check_tensor_arg(const char* cls, const char* fn, const char* name, const at::Tensor& t,
                             at::ScalarType dtype, int64_t dims,
                             const at::Device& device = at::Device(at::kCPU)) {
  const std::string where = std::string("mpe_torch.") + cls + "." + fn + ": " + name;
  if (!t.defined()) throw std::invalid_argument(where + " is undefined");
  if (t.scalar_type() != dtype)
    throw py::type_error(where + " must have dtype " + dtype_name(dtype) + ", got " +
                         dtype_name(t.scalar_type()) + " (convert it yourself, e.g. " + name + ".to(" +
                         dtype_name(dtype) + "))");
  if (t.device() != device)
    throw std::invalid_argument(
        where + " must be on " + (device.is_cpu() ? "the CPU" : device.str()) +
        " (this module's device; move the tensor, or the module with .to()), got device " + t.device().str());
  if (t.layout() != at::kStrided) throw std::invalid_argument(where + " must be a dense (strided) tensor");
  if (t.dim() != dims)
    throw std::invalid_argument(where + " must have " + std::to_string(dims) + " dimension" +
                                (dims == 1 ? "" : "s") + ", got shape " + shape_str(t));
  if (!t.is_contiguous())
    throw std::invalid_argument(where + " must be contiguous (call .contiguous()), got strides that are not");
}

/// A contiguous tensor's elements (host memory when it is a CPU tensor).
template <class T>
std::span<const T> cspan(const at::Tensor& t) {
  return {t.data_ptr<T>(), static_cast<std::size_t>(t.numel())};
}
template <class T>
std::span<T> mspan(at::Tensor& t) {
  return {t.data_ptr<T>(), static_cast<std::size_t>(t.numel())};
}

/// `bytes` as a (n,) uint8 CPU tensor (a copy).
inline at::Tensor bytes_tensor(const std::vector<std::uint8_t>& bytes) {
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(t.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
  return t;
}

}  // namespace mpe_torch
