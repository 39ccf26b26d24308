#include "app/checkpoint.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <stdexcept>

#include "app/run_files.h"

namespace pinfeed::app {
namespace {

constexpr int64_t kFormatVersion = 1;

c10::impl::GenericDict tensor_dict(const std::map<std::string, at::Tensor>& tensors) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, t] : tensors) d.insert(name, t.detach().to(c10::kCPU));  // CPU: loads anywhere
  return d;
}

std::map<std::string, at::Tensor> tensor_map(const c10::IValue& v) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : v.toGenericDict()) out[item.key().toStringRef()] = item.value().toTensor();
  return out;
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("format_version", kFormatVersion);
  d.insert("model", tensor_dict(c.model));
  d.insert("optimizer", tensor_dict(c.optimizer));
  d.insert("epoch", c.epoch);
  d.insert("step_in_epoch", c.step_in_epoch);
  d.insert("global_step", c.global_step);
  d.insert("world_size", c.world_size);
  if (c.torch_rng.defined()) d.insert("torch_rng", c.torch_rng);
  d.insert("config", c.config);
  const std::vector<char> bytes = torch::jit::pickle_save(d);
  write_file_atomic(path, bytes.data(), bytes.size());
}

Checkpoint load_checkpoint(const std::string& path) {
  const std::vector<char> bytes = read_file_bytes(path);
  c10::IValue v;
  try {
    v = torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot read checkpoint " + path + ": " + e.what());
  }
  if (!v.isGenericDict()) throw std::runtime_error(path + " is not a pinfeed checkpoint");
  const auto d = v.toGenericDict();
  if (!d.contains("format_version") || d.at("format_version").toInt() != kFormatVersion) {
    throw std::runtime_error(path + " is not a pinfeed checkpoint of format " + std::to_string(kFormatVersion));
  }
  Checkpoint c;
  c.model = tensor_map(d.at("model"));
  c.optimizer = tensor_map(d.at("optimizer"));
  c.epoch = d.at("epoch").toInt();
  c.step_in_epoch = d.at("step_in_epoch").toInt();
  c.global_step = d.at("global_step").toInt();
  if (d.contains("world_size")) c.world_size = d.at("world_size").toInt();
  if (d.contains("torch_rng")) c.torch_rng = d.at("torch_rng").toTensor();
  c.config = d.at("config").toStringRef();
  return c;
}

}  // namespace pinfeed::app
