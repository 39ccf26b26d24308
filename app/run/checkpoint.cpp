#include "app/run/checkpoint.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <stdexcept>

#include "app/run/run_files.h"

namespace pinfeed::app {
namespace {

// 1: dicts carried TorchScript type tags; 2: plain dicts, plus batch_size, train_images, steps_per_epoch (and,
// optional, epoch_loss_sums, rank_buffers and loss_scaler, which a reader that does not know them ignores).
constexpr int64_t kFormatVersion = 2;
constexpr int64_t kOldestFormat = 1;

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

// torch::jit::pickle_save, less the type tags. Its Pickler wraps every dict and list in
// torch.jit._pickle.restore_type_tag(obj, "Dict[str, Tensor]") so that TorchScript gets its static type back;
// torch.load's weights_only unpickler (the default since PyTorch 2.6) refuses that global. Without the tags
// the pickle holds only what it allows (dicts, strings, ints, torch._utils._rebuild_tensor_v2, storages), in
// the same zip container that torch.save writes. LibTorch's unpickler reads an untagged dict as
// Dict[Any, Any], which load_checkpoint handles.
std::vector<char> pickle_untagged(const c10::IValue& value) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* bytes, size_t n) { pickle.insert(pickle.end(), bytes, bytes + n); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> container;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t n) {
    const char* b = static_cast<const char*>(bytes);
    container.insert(container.end(), b, b + n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return container;
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
  d.insert("batch_size", c.batch_size);
  d.insert("train_images", c.train_images);
  d.insert("steps_per_epoch", c.steps_per_epoch);
  if (c.torch_rng.defined()) d.insert("torch_rng", c.torch_rng);
  if (c.epoch_loss_sums.defined()) d.insert("epoch_loss_sums", c.epoch_loss_sums.detach().cpu());
  if (c.rank_buffers.defined()) d.insert("rank_buffers", c.rank_buffers.detach().cpu());
  if (!c.loss_scaler.empty()) d.insert("loss_scaler", tensor_dict(c.loss_scaler));
  d.insert("config", c.config);
  const std::vector<char> bytes = pickle_untagged(d);
  write_file_atomic(path, bytes.data(), bytes.size());
}

Checkpoint load_checkpoint(const std::string& path) {
  const std::vector<char> bytes = read_file_bytes(path);
  c10::IValue v;
  try {
    v = torch::jit::pickle_load(bytes);  // reads both formats: the unpickler knows restore_type_tag
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot read checkpoint " + path + ": " + e.what());
  }
  if (!v.isGenericDict()) throw std::runtime_error(path + " is not a pinfeed checkpoint");
  const auto d = v.toGenericDict();
  const int64_t format = d.contains("format_version") && d.at("format_version").isInt() ? d.at("format_version").toInt() : 0;
  if (format < kOldestFormat || format > kFormatVersion) {
    throw std::runtime_error(path + " is not a pinfeed checkpoint of format " + std::to_string(kOldestFormat) + " to " +
                             std::to_string(kFormatVersion) +
                             (format > kFormatVersion ? " (format " + std::to_string(format) + ": a newer pinfeed wrote it)" : ""));
  }
  Checkpoint c;
  c.format_version = format;
  c.model = tensor_map(d.at("model"));
  c.optimizer = tensor_map(d.at("optimizer"));
  c.epoch = d.at("epoch").toInt();
  c.step_in_epoch = d.at("step_in_epoch").toInt();
  c.global_step = d.at("global_step").toInt();
  if (d.contains("world_size")) c.world_size = d.at("world_size").toInt();
  if (format >= 2) {
    c.batch_size = d.at("batch_size").toInt();
    c.train_images = d.at("train_images").toInt();
    c.steps_per_epoch = d.at("steps_per_epoch").toInt();
  }
  if (d.contains("torch_rng")) c.torch_rng = d.at("torch_rng").toTensor();
  if (d.contains("epoch_loss_sums")) c.epoch_loss_sums = d.at("epoch_loss_sums").toTensor();
  if (d.contains("rank_buffers")) c.rank_buffers = d.at("rank_buffers").toTensor();
  if (d.contains("loss_scaler")) c.loss_scaler = tensor_map(d.at("loss_scaler"));
  c.config = d.at("config").toStringRef();
  return c;
}

}  // namespace pinfeed::app
