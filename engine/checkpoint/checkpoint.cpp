#include "engine/checkpoint/checkpoint.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <ATen/ops/isfinite.h>

#include <set>
#include <sstream>
#include <stdexcept>

#include "engine/errors.h"
#include "engine/files.h"
#include "engine/checkpoint/torch_file.h"
#include "data/error.h"

namespace pinfeed::engine {
namespace {

// 1: dicts carried TorchScript type tags; 2: plain dicts, plus batch_size, train_images, steps_per_epoch (and,
// optional, epoch_loss_sums, rank_buffers, loss_scaler, optimizer_name, model_ema, ema_updates, best_weights and
// model_raw, which a reader that does not know them ignores).
constexpr int64_t kFormatVersion = 2;
constexpr int64_t kOldestFormat = 1;

c10::impl::GenericDict tensor_dict_of(const std::map<std::string, at::Tensor>& tensors) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, t] : tensors) d.insert(name, t.detach().to(c10::kCPU));  // CPU: loads anywhere
  return d;
}

[[noreturn]] void damaged(const std::string& path, const std::string& why) {
  throw DataError(path + ": damaged checkpoint: " + why);
}

// d[key] as tensors by name (key "": d itself); every value must be a tensor.
std::map<std::string, at::Tensor> tensor_map(const c10::impl::GenericDict& d, const std::string& path,
                                             const std::string& key) {
  c10::impl::GenericDict tensors = d;
  if (!key.empty()) {
    if (!d.contains(key) || !d.at(key).isGenericDict()) damaged(path, key + " is missing or not a dict of tensors");
    tensors = d.at(key).toGenericDict();
  }
  std::map<std::string, at::Tensor> out;
  for (const auto& item : tensors) {
    if (!item.key().isString() || !item.value().isTensor()) damaged(path, key + " holds something other than named tensors");
    out[item.key().toStringRef()] = item.value().toTensor();
  }
  return out;
}

// Weights that are NaN or infinite would evaluate, predict and train as garbage without a word.
void check_finite(const std::map<std::string, at::Tensor>& tensors, const std::string& path, const std::string& key) {
  for (const auto& [name, t] : tensors) {
    if (t.is_floating_point() && !at::isfinite(t).all().item<bool>()) {
      throw DataError(path + ": " + (key.empty() ? "" : key + ".") + name + " holds NaN or infinite values "
                      "(saved from a diverged run?)");
    }
  }
}

// The position is one count: every epoch before this one ran steps_per_epoch steps (a resume refuses another
// value), so global_step is epoch x steps_per_epoch + step_in_epoch. An epoch past train.epochs' own bound, or a
// global step that disagrees, is no position pinfeed wrote.
void check_position(const Checkpoint& c, const std::string& path) {
  constexpr int64_t kMaxEpochs = 1'000'000;  // train.epochs' bound (app/config)
  if (c.epoch > kMaxEpochs) {
    damaged(path, "epoch = " + std::to_string(c.epoch) + " is impossible (train.epochs is at most " +
                      std::to_string(kMaxEpochs) + ")");
  }
  if (c.steps_per_epoch > 0 && c.global_step != c.epoch * c.steps_per_epoch + c.step_in_epoch) {
    damaged(path, "global_step = " + std::to_string(c.global_step) + " does not match epoch " +
                      std::to_string(c.epoch) + " x steps_per_epoch " + std::to_string(c.steps_per_epoch) +
                      " + step_in_epoch " + std::to_string(c.step_in_epoch));
  }
}

bool is_scalar_state(const std::string& key) { return key == "step"; }  // LAMB's step: one element, no parameter

// The kind of a per-parameter optimizer entry: "" for "<parameter>" (momentum), "exp_avg" for "exp_avg/<parameter>".
std::string state_kind(const std::string& key) {
  const size_t slash = key.find('/');
  return slash == std::string::npos ? "" : key.substr(0, slash);
}

// The optimizer's state entry by entry: per-parameter tensors named "<parameter>" (momentum) or "<kind>/<parameter>"
// (LAMB's exp_avg, exp_avg_sq), each of its parameter's shape; and one-element scalars by their own name (LAMB's
// step). Whether every parameter has its entries is check_optimizer_covers_model's, once the model's names are
// known to be the network's.
void check_optimizer_state(const Checkpoint& c, const std::string& path) {
  for (const auto& [key, t] : c.optimizer) {
    if (is_scalar_state(key)) {
      if (t.numel() != 1) damaged(path, "optimizer." + key + " has " + std::to_string(t.numel()) + " elements, expected 1");
      continue;
    }
    const std::string kind = state_kind(key);
    const std::string name = kind.empty() ? key : key.substr(kind.size() + 1);
    const auto it = c.model.find(name);
    if (it == c.model.end()) damaged(path, "optimizer." + key + " belongs to no parameter of the model");
    if (t.sizes() != it->second.sizes()) {
      damaged(path, "optimizer." + key + " has shape " + c10::str(t.sizes()) + ", its parameter " +
                        c10::str(it->second.sizes()));
    }
  }
}

// An optional string key: its value, or `otherwise` when absent.
std::string string_at(const c10::impl::GenericDict& d, const std::string& path, const std::string& key,
                      const std::string& otherwise) {
  if (!d.contains(key)) return otherwise;
  if (!d.at(key).isString()) damaged(path, key + " is not a string");
  return d.at(key).toStringRef();
}

// Another set of the model's weights (model_ema, model_raw): the model's names and shapes exactly.
void check_same_names(const std::map<std::string, at::Tensor>& other, const Checkpoint& c, const std::string& path,
                      const std::string& key) {
  for (const auto& [name, t] : other) {
    const auto it = c.model.find(name);
    if (it == c.model.end()) damaged(path, key + "." + name + " is not in model");
    if (t.sizes() != it->second.sizes()) {
      damaged(path, key + "." + name + " has shape " + c10::str(t.sizes()) + ", model's " + c10::str(it->second.sizes()));
    }
  }
  for (const auto& [name, t] : c.model) {
    if (!other.count(name)) damaged(path, key + " lacks " + name);
  }
}

int64_t int_at(const c10::impl::GenericDict& d, const std::string& path, const std::string& key, int64_t min) {
  if (!d.contains(key) || !d.at(key).isInt()) damaged(path, key + " is missing or not an integer");
  const int64_t v = d.at(key).toInt();
  if (v < min) damaged(path, key + " = " + std::to_string(v) + " is impossible (at least " + std::to_string(min) + ")");
  return v;
}

at::Tensor tensor_at(const c10::impl::GenericDict& d, const std::string& path, const std::string& key) {
  if (!d.contains(key)) return {};
  if (!d.at(key).isTensor()) damaged(path, key + " is not a tensor");
  return d.at(key).toTensor();
}

// A state dict: tensors by name and nothing else (what torch.save(model.state_dict()) writes).
bool is_state_dict(const c10::impl::GenericDict& d) {
  if (d.size() == 0) return false;
  for (const auto& item : d) {
    if (!item.key().isString() || !item.value().isTensor()) return false;
  }
  return true;
}

c10::impl::GenericDict read_dict(const std::string& path) {
  const c10::IValue v = parse_torch_file(read_torch_file(path), path);
  if (!v.isGenericDict()) {
    throw CheckpointError(path + ": holds a " + v.tagKind() + ", not a pinfeed checkpoint or a state dict (a dict)");
  }
  return v.toGenericDict();
}

std::vector<std::string> classes_at(const c10::impl::GenericDict& d, const std::string& path) {
  std::vector<std::string> out;
  if (!d.contains("classes")) return out;
  const c10::IValue& v = d.at("classes");
  if (v.isString()) {  // one newline-joined string
    std::string line;
    for (std::istringstream in(v.toStringRef()); std::getline(in, line);) out.push_back(line);
    return out;
  }
  if (!v.isList()) damaged(path, "classes is neither a list of strings nor a string");
  for (const c10::IValue& name : v.toListRef()) {
    if (!name.isString()) damaged(path, "classes holds something other than strings");
    out.push_back(name.toStringRef());
  }
  return out;
}

Checkpoint from_dict(const c10::impl::GenericDict& d, const std::string& path) {
  const int64_t format = d.contains("format_version") && d.at("format_version").isInt() ? d.at("format_version").toInt() : 0;
  if (format < kOldestFormat || format > kFormatVersion) {
    std::string keys;
    for (const auto& item : d) {
      if (keys.size() > 60) break;
      keys += (keys.empty() ? "" : ", ") + (item.key().isString() ? item.key().toStringRef() : std::string("?"));
    }
    throw CheckpointError(path + ": not a pinfeed checkpoint of format " + std::to_string(kOldestFormat) + " to " +
                      std::to_string(kFormatVersion) +
                      (format > kFormatVersion ? " (format " + std::to_string(format) + ": a newer pinfeed wrote it)"
                                               : " nor a state dict (tensors by name): a dict of " + keys));
  }
  Checkpoint c;
  c.format_version = format;
  c.path = path;
  c.model = tensor_map(d, path, "model");
  c.optimizer = tensor_map(d, path, "optimizer");
  check_finite(c.model, path, "model");
  check_finite(c.optimizer, path, "optimizer");
  c.epoch = int_at(d, path, "epoch", 0);
  c.step_in_epoch = int_at(d, path, "step_in_epoch", 0);
  c.global_step = int_at(d, path, "global_step", 0);
  if (d.contains("world_size")) c.world_size = int_at(d, path, "world_size", 1);
  if (format >= 2) {
    c.batch_size = int_at(d, path, "batch_size", 0);
    c.train_images = int_at(d, path, "train_images", 0);
    c.steps_per_epoch = int_at(d, path, "steps_per_epoch", 0);
    if (c.steps_per_epoch > 0 && c.step_in_epoch > c.steps_per_epoch) {
      damaged(path, "step_in_epoch = " + std::to_string(c.step_in_epoch) + " is past steps_per_epoch = " +
                        std::to_string(c.steps_per_epoch));
    }
    check_position(c, path);
  }
  check_optimizer_state(c, path);
  c.torch_rng = tensor_at(d, path, "torch_rng");
  c.epoch_loss_sums = tensor_at(d, path, "epoch_loss_sums");
  c.rank_buffers = tensor_at(d, path, "rank_buffers");
  if (d.contains("loss_scaler")) c.loss_scaler = tensor_map(d, path, "loss_scaler");
  c.optimizer_name = string_at(d, path, "optimizer_name", "sgd");
  for (const auto& [key, target] : {std::pair<const char*, std::map<std::string, at::Tensor>*>{"model_ema", &c.model_ema},
                                    {"model_raw", &c.model_raw}}) {
    if (!d.contains(key)) continue;
    *target = tensor_map(d, path, key);
    check_finite(*target, path, key);
    check_same_names(*target, c, path, key);
  }
  if (d.contains("ema_updates")) c.ema_updates = int_at(d, path, "ema_updates", 0);
  c.best_weights = string_at(d, path, "best_weights", "");
  if (!c.best_weights.empty() && c.best_weights != "raw" && c.best_weights != "ema") {
    damaged(path, "best_weights is neither \"raw\" nor \"ema\"");
  }
  c.classes = classes_at(d, path);
  if (d.contains("best_val_top1") && d.at("best_val_top1").isDouble()) c.best_val_top1 = d.at("best_val_top1").toDouble();
  if (!d.contains("config") || !d.at("config").isString()) damaged(path, "config is missing or not a string");
  c.config = d.at("config").toStringRef();
  return c;
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
  d.insert("model", tensor_dict_of(c.model));
  d.insert("optimizer", tensor_dict_of(c.optimizer));
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
  if (!c.loss_scaler.empty()) d.insert("loss_scaler", tensor_dict_of(c.loss_scaler));
  d.insert("optimizer_name", c.optimizer_name);
  if (!c.model_ema.empty()) {
    d.insert("model_ema", tensor_dict_of(c.model_ema));
    d.insert("ema_updates", c.ema_updates);
  }
  if (!c.best_weights.empty()) d.insert("best_weights", c.best_weights);
  if (!c.model_raw.empty()) d.insert("model_raw", tensor_dict_of(c.model_raw));
  if (!c.classes.empty()) {  // a list of strings: torch.load(weights_only=True) reads it as one
    c10::impl::GenericList classes(c10::StringType::get());
    for (const std::string& name : c.classes) classes.push_back(name);
    d.insert("classes", classes);
  }
  if (!std::isnan(c.best_val_top1)) d.insert("best_val_top1", c.best_val_top1);
  d.insert("config", c.config);
  const std::vector<char> bytes = pickle_untagged(d);
  write_file_atomic(path, bytes.data(), bytes.size());
}

Checkpoint load_checkpoint(const std::string& path) {
  const c10::impl::GenericDict d = read_dict(path);
  if (is_state_dict(d)) {
    throw CheckpointError(path + ": a state dict (weights only, no training position), not a pinfeed checkpoint: to "
                      "start a new run from its weights, set train.init_from = \"" + path + "\"");
  }
  return from_dict(d, path);
}

Weights load_weights(const std::string& path) {
  const c10::impl::GenericDict d = read_dict(path);
  Weights w;
  if (is_state_dict(d)) {
    w.model = tensor_map(d, path, "");
    check_finite(w.model, path, "");
    return w;
  }
  Checkpoint c = from_dict(d, path);
  w.model = std::move(c.model);
  w.classes = std::move(c.classes);
  w.config = std::move(c.config);
  w.checkpoint = true;
  return w;
}

void check_optimizer_covers_model(const Checkpoint& c, const std::string& path) {
  if (c.optimizer.empty()) return;  // a step never taken: the optimizer starts its state at the first step
  std::set<std::string> kinds;
  for (const auto& [key, t] : c.optimizer) {
    if (!is_scalar_state(key)) kinds.insert(state_kind(key));
  }
  for (const auto& [name, weight] : c.model) {
    const auto ends_with = [&](const std::string& tail) {
      return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (!ends_with(".weight") && !ends_with(".bias")) continue;
    for (const std::string& kind : kinds) {
      if (c.optimizer.count(kind.empty() ? name : kind + "/" + name)) continue;
      damaged(path, kind.empty() ? "optimizer lacks the momentum buffer of " + name
                                 : "optimizer lacks " + kind + "/" + name);
    }
  }
}

}  // namespace pinfeed::engine
