#include "app/config/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <regex>
#include <sstream>
#include <variant>

#include <toml++/toml.h>

#include "app/config/suggest.h"
#include "data/dataset/image_folder.h"

namespace pinfeed::app {
namespace {

using data::printable;
using Value = std::variant<bool, int64_t, double, std::string>;
enum class Type { kBool, kInt, kFloat, kString };

const char* type_name(Type t) {
  switch (t) {
    case Type::kBool: return "bool";
    case Type::kInt: return "integer";
    case Type::kFloat: return "float";
    default: return "string";
  }
}

// One config key: its type, how to read and write it in Config, what values are allowed, what it does.
struct Key {
  std::string name;  // "section.key"
  Type type;
  std::function<void(Config&, const Value&)> set;
  std::function<Value(const Config&)> get;
  std::function<std::string(const Value&)> check;  // "" when fine, else what is wrong
  std::string help;
};

template <class T>
struct identity {
  using type = T;
};

template <class S, class T>
Key key(const char* name, S Config::*section, T S::*member, std::string help,
        std::function<std::string(const typename identity<T>::type&)> check = nullptr) {
  Key k;
  k.name = name;
  if constexpr (std::is_same_v<T, bool>) k.type = Type::kBool;
  else if constexpr (std::is_same_v<T, int64_t>) k.type = Type::kInt;
  else if constexpr (std::is_same_v<T, double>) k.type = Type::kFloat;
  else k.type = Type::kString;
  auto as_t = [](const Value& v) -> T {
    if constexpr (std::is_same_v<T, double>) {
      if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    }
    return std::get<T>(v);
  };
  k.set = [section, member, as_t](Config& c, const Value& v) { (c.*section).*member = as_t(v); };
  k.get = [section, member](const Config& c) -> Value { return (c.*section).*member; };
  k.check = [check, as_t](const Value& v) {
    if constexpr (std::is_same_v<T, double>) {
      // TOML reads nan and inf as floats; no range check below would catch a NaN (every comparison is false).
      if (const double d = as_t(v); !std::isfinite(d)) {
        std::ostringstream s;
        s << "must be a finite number, got " << d;
        return s.str();
      }
    }
    return check ? check(as_t(v)) : std::string();
  };
  k.help = std::move(help);
  return k;
}

template <class T>
std::function<std::string(const T&)> at_least(T lo) {
  return [lo](const T& v) {
    std::ostringstream s;
    if (v < lo) s << "must be >= " << lo << ", got " << v;
    return s.str();
  };
}

std::function<std::string(const int64_t&)> between(int64_t lo, int64_t hi) {
  return [lo, hi](const int64_t& v) {
    std::ostringstream s;
    if (v < lo) s << "must be >= " << lo << ", got " << v;
    if (v > hi) s << "must be <= " << hi << ", got " << v;
    return s.str();
  };
}

std::function<std::string(const double&)> in_range(double lo, double hi, bool hi_open) {
  return [=](const double& v) {
    std::ostringstream s;
    if (v < lo || v > hi || (hi_open && v == hi)) s << "must be in [" << lo << ", " << hi << (hi_open ? ")" : "]") << ", got " << v;
    return s.str();
  };
}

std::function<std::string(const std::string&)> one_of(std::vector<std::string> choices) {
  return [choices](const std::string& v) {
    std::string all;
    for (const auto& c : choices) {
      if (v == c) return std::string();
      all += (all.empty() ? "\"" : " | \"") + c + "\"";
    }
    return "must be one of " + all + ", got \"" + printable(v) + "\"" + did_you_mean(v, choices);
  };
}

std::string check_device(const std::string& v) {
  static const std::regex re("auto|cpu|cuda(:[0-9]+)?");
  return std::regex_match(v, re) ? "" : "must be \"auto\", \"cpu\", \"cuda\" or \"cuda:N\", got \"" + printable(v) + "\"";
}

// A path key: any bytes a file name may hold but control characters. A newline or an escape sequence in a folder
// name is far likelier a paste accident than a real folder, and every message naming the path would carry it.
std::string check_path(const std::string& v) {
  if (std::none_of(v.begin(), v.end(), [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; })) return "";
  return "must not hold control characters, got \"" + printable(v) + "\"";
}

// The run folder is <run.dir>/<timestamp>-<name>: a name with '/' or ".." would put it (and every checkpoint)
// outside run.dir, and a control character makes a folder no shell or log line shows as it is. 100 bytes
// leaves room for the timestamp and a "-N" suffix under NAME_MAX (255).
std::string check_run_name(const std::string& v) {
  constexpr size_t kMaxLength = 100;
  const bool control = std::any_of(v.begin(), v.end(), [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; });
  if (!v.empty() && v.size() <= kMaxLength && v.find('/') == std::string::npos && v.find("..") == std::string::npos &&
      !control) {
    return "";
  }
  return "must be a plain folder name (1 to " + std::to_string(kMaxLength) +
         " bytes, no '/', no \"..\", no control characters), got \"" + printable(v) + "\"";
}

std::string check_step_range(const std::string& v) {
  try {
    parse_step_range(v);
    return "";
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

std::string check_mode(const std::string& v) {
  if (v.empty() || pipeline::find_preset(v)) return "";
  return "must be one of " + pipeline::preset_names() + ", got \"" + printable(v) + "\"";
}

// Upper limits of the keys that size memory or threads. The plan (app/plan/plan.cpp) checks the sizes they combine
// into against this machine; these bounds keep each value, and products of them, far from overflow.
constexpr int64_t kMaxImageSize = 4096;  // one 4096 px crop is 200 MB of float32; ResNet-50 is trained at 128-600 px
constexpr int64_t kMaxBatchSize = 1 << 20;  // per rank; the largest ImageNet batches published are 64k global
constexpr int64_t kMaxWorkers = 1024;  // the plan lowers it to 4 x this host's cores
constexpr int64_t kMaxPrefetchBatches = 1024;  // decoded batches held in RAM; more only costs memory
// ImageNet-21k has 21,841 classes; at 100,000 the fc layer alone is 205M parameters (0.8 GB, 2.5 GB with
// gradients and momentum).
constexpr int64_t kMaxClasses = 100'000;
constexpr int64_t kMaxMegabytes = int64_t{1} << 30;  // 1 PB: MB x 2^20 stays far inside int64
constexpr int64_t kMaxTimeoutS = 7 * 24 * 3600;  // a week; c10d converts to milliseconds

const std::vector<Key>& keys() {
  using C = Config;
  static const std::vector<Key> table = {
      key("data.root", &C::data, &DataConfig::root, "ImageFolder root holding <train_split>/ and <val_split>/; ~/ expands", check_path),
      key("data.train_split", &C::data, &DataConfig::train_split, "training split folder under root", check_path),
      key("data.val_split", &C::data, &DataConfig::val_split, "validation split folder under root", check_path),
      key("data.image_size", &C::data, &DataConfig::image_size, "side of the square crop fed to the model, px", between(16, kMaxImageSize)),
      key("data.val_resize_ratio", &C::data, &DataConfig::val_resize_ratio, "val: resize shorter side to image_size/ratio, centre crop", in_range(0.1, 1.0, false)),
      key("data.scale_min", &C::data, &DataConfig::scale_min, "RandomResizedCrop smallest area fraction", in_range(0.001, 1.0, false)),
      key("data.scale_max", &C::data, &DataConfig::scale_max, "RandomResizedCrop largest area fraction", in_range(0.001, 1.0, false)),
      key("data.hflip", &C::data, &DataConfig::hflip, "random horizontal flip in training"),
      key("data.crop_decode", &C::data, &DataConfig::crop_decode, "JPEG: decode only the crop region (libjpeg-turbo), DCT-scaled 1/2..1/8 when the crop allows; false: full OpenCV decode"),
      key("data.workers", &C::data, &DataConfig::workers, "decode threads; 0 = cores - 3 (cores - 1 on 4 cores or fewer); at most 4 x cores", between(0, kMaxWorkers)),
      key("data.prefetch_batches", &C::data, &DataConfig::prefetch_batches, "batches decoded ahead of the training loop, across the end of an epoch too; the ring (this + 2 batches, train and val) must fit in half the RAM", between(1, kMaxPrefetchBatches)),
      key("data.on_bad_image", &C::data, &DataConfig::on_bad_image, "a corrupt image is replaced and counted (skip) or stops the run (fail)", one_of({"skip", "fail"})),
      key("data.max_image_pixels", &C::data, &DataConfig::max_image_pixels, "an image whose header declares more pixels is a bad image (on_bad_image applies), refused before decoding; 0 = no limit", at_least<int64_t>(0)),
      key("data.max_file_mb", &C::data, &DataConfig::max_file_mb, "a file larger than this (MiB) is a bad image, refused before it is read; 0 = no limit", between(0, int64_t{1} << 30)),
      key("data.sample_timeout_s", &C::data, &DataConfig::sample_timeout_s, "a sample still loading after this many seconds (a read or decode that never returns) stops the run naming its file (exit 3); 0 = no bound", in_range(0.0, 86400.0, false)),
      key("data.decoder", &C::data, &DataConfig::decoder, "cpu (libjpeg-turbo in the workers) | nvjpeg (the GPU decodes JPEGs, workers only read files; CUDA only) | auto (nvjpeg on CUDA when built in)", one_of(kDecoders)),
      key("data.gpu_decode_share", &C::data, &DataConfig::gpu_decode_share, "with the GPU decoder: the fraction of samples (fixed by index) whose JPEGs it takes; the workers decode the rest", in_range(0.0, 1.0, false)),
      key("model.arch", &C::model, &ModelConfig::arch, "network", one_of({"resnet50"})),
      key("model.num_classes", &C::model, &ModelConfig::num_classes, "classifier outputs; 0 = number of class folders", between(0, kMaxClasses)),
      key("model.zero_init_residual", &C::model, &ModelConfig::zero_init_residual, "zero-init each block's last BN (Goyal et al. 2017)"),
      key("model.max_pool", &C::model, &ModelConfig::max_pool, "the stem's max pool in training: auto (pinfeed's on CUDA + channels_last, else ATen's) | pinfeed (its own kernels: one-byte argmax, gathering backward; the same values as ATen's, 5% faster step) | aten", one_of({"auto", "pinfeed", "aten"})),
      key("model.pad_input", &C::model, &ModelConfig::pad_input, "the model's input made fp16 with a zero fourth channel on the GPU (the 7x7 stem convolution runs faster on 4 channels than on 3): auto (on for CUDA + channels_last + fp16 + uint8 pixels) | on | off", one_of({"auto", "on", "off"})),
      key("model.fold_grad_add", &C::model, &ModelConfig::fold_grad_add, "in training, the two gradients at each block's input summed by conv1's data-gradient GEMM as it writes, not by a separate add: auto (on where model.fused_bn is) | on (needs train.channels_last) | off", one_of({"auto", "on", "off"})),
      key("model.bn_graph", &C::model, &ModelConfig::bn_graph, "with model.fused_bn, which BatchNorms run through the cuDNN frontend's graph API instead of cuDNN's ...Ex calls (the build needs the frontend's headers): auto (conv in fp16, small otherwise: where each was measured faster) | small (the BN + ReLU and BN + add + ReLU at 14x14 and smaller) | conv (small's, and each block's conv3 writing its BN's statistics from the convolution, then one scale-bias-add-ReLU pass; fp16 only) | all (every BN + ReLU and BN + add + ReLU) | off", one_of({"auto", "small", "conv", "all", "off"})),
      key("model.fused_bn", &C::model, &ModelConfig::fused_bn, "BN, BN + ReLU and BN + add + ReLU as one cuDNN op each in training: auto (on for CUDA + channels_last + bf16/fp16) | on | off (ATen's separate ops)", one_of({"auto", "on", "off"})),
      key("train.epochs", &C::train, &TrainConfig::epochs, "epochs to train", between(1, 1'000'000)),
      key("train.batch_size", &C::train, &TrainConfig::batch_size, "samples per step (per rank)", between(1, kMaxBatchSize)),
      key("train.lr", &C::train, &TrainConfig::lr, "peak learning rate (after warm-up)", in_range(0, 1e3, false)),
      key("train.lr_reference_batch", &C::train, &TrainConfig::lr_reference_batch, "0: lr is the rate as given; B: lr and min_lr are per B samples, scaled linearly to the global batch (batch_size x ranks; Goyal et al. 2017)", between(0, kMaxBatchSize)),
      key("train.momentum", &C::train, &TrainConfig::momentum, "SGD momentum", in_range(0, 1, true)),
      key("train.nesterov", &C::train, &TrainConfig::nesterov, "Nesterov momentum"),
      key("train.weight_decay", &C::train, &TrainConfig::weight_decay, "L2 weight decay", in_range(0, 1, false)),
      key("train.decay_bn_and_bias", &C::train, &TrainConfig::decay_bn_and_bias, "false: no weight decay on BN parameters and biases"),
      key("train.warmup_epochs", &C::train, &TrainConfig::warmup_epochs, "linear LR warm-up length (fractions allowed)", in_range(0, 1e6, false)),
      key("train.min_lr", &C::train, &TrainConfig::min_lr, "LR at the end of the cosine schedule", in_range(0, 1e3, false)),
      key("train.label_smoothing", &C::train, &TrainConfig::label_smoothing, "cross-entropy label smoothing", in_range(0, 1, true)),
      key("train.precision", &C::train, &TrainConfig::precision, "fp32 | tf32 (TF32 matmul/conv) | bf16 (autocast) | fp16 (autocast with dynamic loss scaling); CUDA only beyond fp32", one_of({"fp32", "tf32", "bf16", "fp16"})),
      key("train.loss_scale_init", &C::train, &TrainConfig::loss_scale_init, "fp16: first value of the dynamic loss scale (halved on each overflow)", in_range(1, 1e30, false)),
      key("train.loss_scale_growth_interval", &C::train, &TrainConfig::loss_scale_growth_interval, "fp16: steps without overflow before the loss scale doubles", between(1, 1'000'000'000)),
      key("train.channels_last", &C::train, &TrainConfig::channels_last, "NHWC memory format for the model and its input"),
      key("train.cudnn_benchmark", &C::train, &TrainConfig::cudnn_benchmark, "let cuDNN pick the fastest kernels"),
      key("train.cuda_graph", &C::train, &TrainConfig::cuda_graph, "capture the whole training step as a CUDA graph and replay it (CUDA only)"),
      key("train.seed", &C::train, &TrainConfig::seed, "seed of init, shuffling and augmentation", at_least<int64_t>(0)),
      key("train.device", &C::train, &TrainConfig::device, "auto (CUDA if present) | cpu | cuda | cuda:N", check_device),
      key("train.max_steps_per_epoch", &C::train, &TrainConfig::max_steps_per_epoch, "cap on steps per epoch; 0 = whole epoch", at_least<int64_t>(0)),
      key("train.eval", &C::train, &TrainConfig::eval, "evaluate on the val split after each epoch"),
      key("train.init_from", &C::train, &TrainConfig::init_from, "a new run starts from the weights of this pinfeed checkpoint or torch.save(model.state_dict()) file (not its optimizer or epoch); another number of classes re-initialises fc; ~/ expands; \"\" = none", check_path),
      key("pipeline.mode", &C::pipeline, &PipelineConfig::mode, "preset: " + pipeline::preset_names() + "; sets the three flags below", check_mode),
      key("pipeline.pin_memory", &C::pipeline, &PipelineConfig::pin_memory, "workers write batches into page-locked buffers"),
      key("pipeline.non_blocking", &C::pipeline, &PipelineConfig::non_blocking, "asynchronous host-to-device copies"),
      key("pipeline.prefetch", &C::pipeline, &PipelineConfig::prefetch, "dual_stream: copy the next batch on its own stream during compute", one_of({"none", "dual_stream"})),
      key("pipeline.transfer_dtype", &C::pipeline, &PipelineConfig::transfer_dtype, "float32 (normalised on host) | uint8 (normalised on GPU, 4x fewer bytes)", one_of({"float32", "uint8"})),
      key("pipeline.pinned_budget_mb", &C::pipeline, &PipelineConfig::pinned_budget_mb, "cap on page-locked MB; 0 = 30% of RAM", between(0, kMaxMegabytes)),
      key("pipeline.max_steps_ahead", &C::pipeline, &PipelineConfig::max_steps_ahead, "the host queues at most this many steps ahead of the GPU, then waits (ahead_ms, not wait_ms); 0 = no limit; 1 serialises host and GPU", between(0, kMaxPrefetchBatches)),
      key("pipeline.warmup_steps", &C::pipeline, &PipelineConfig::warmup_steps, "steps per epoch left out of the timing figures", between(0, 1'000'000)),
      key("dist.backend", &C::dist, &DistConfig::backend, "several ranks: auto (nccl on CUDA, gloo on the CPU) | nccl | gloo", one_of({"auto", "nccl", "gloo"})),
      key("dist.bucket_mb", &C::dist, &DistConfig::bucket_mb, "several ranks: gradients all-reduced per bucket, MB (DDP's bucket_cap_mb)", in_range(0.001, 4096, false)),
      key("dist.overlap", &C::dist, &DistConfig::overlap, "several ranks: all-reduce each bucket during backward; false: after backward"),
      key("dist.timeout_s", &C::dist, &DistConfig::timeout_s, "several ranks: bound on joining the group and on every collective, s", between(1, kMaxTimeoutS)),
      key("run.name", &C::run, &RunConfig::name, "run directory is <dir>/<timestamp>-<name>; a plain folder name (no '/', no '..')", check_run_name),
      key("run.dir", &C::run, &RunConfig::dir, "where run directories go", check_path),
      key("run.log_steps", &C::run, &RunConfig::log_steps, "write per-step figures to steps.jsonl"),
      key("run.trace_steps", &C::run, &RunConfig::trace_steps, "\"A-B\": a Kineto trace of global steps A to B (from 0, within one epoch) into trace_steps_A-B.json, for Perfetto; \"\" = off", check_step_range),
      key("run.checkpoint_every", &C::run, &RunConfig::checkpoint_every, "epochs between checkpoints", between(1, 1'000'000)),
      key("run.progress_interval_s", &C::run, &RunConfig::progress_interval_s, "seconds between progress lines when not on a terminal", in_range(0.1, 1e6, false)),
  };
  return table;
}

const Key* find_key(const std::string& name) {
  for (const auto& k : keys()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

constexpr const char* kSections[] = {"data", "model", "train", "pipeline", "dist", "run"};

// "unknown key 'x'" with the key most likely meant: the same key name in its right section (epochs, data.lr),
// else the nearest key by edit distance (train.learning_rte).
std::string unknown_key(const std::string& name) {
  const auto dot = name.find('.');
  const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
  std::vector<std::string> names;
  std::string same_leaf;
  for (const auto& k : keys()) {
    names.push_back(k.name);
    if (k.name.substr(k.name.find('.') + 1) == leaf) same_leaf = k.name;
  }
  const std::string hint = !same_leaf.empty() ? "; did you mean '" + same_leaf + "'?" : did_you_mean(name, names);
  return "unknown key '" + printable(name) + "'" + hint + " (pinfeed help config lists every key)";
}

std::string where(const std::string& source, const toml::source_region& r) {
  return source + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

// The node's value as the key's type, or an error message.
bool read_value(const toml::node& node, Type type, Value* out) {
  switch (type) {
    case Type::kBool:
      if (auto v = node.value_exact<bool>()) { *out = *v; return true; }
      return false;
    case Type::kInt:
      if (auto v = node.value_exact<int64_t>()) { *out = *v; return true; }
      return false;
    case Type::kFloat:
      if (node.is_integer()) { *out = static_cast<double>(*node.value_exact<int64_t>()); return true; }
      if (auto v = node.value_exact<double>()) { *out = *v; return true; }
      return false;
    default:
      if (auto v = node.value_exact<std::string>()) { *out = *v; return true; }
      return false;
  }
}

const char* node_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "bool";
    default: return "date/time";
  }
}

// What a key of this type takes, as the error says it.
const char* expected_value(Type t) {
  switch (t) {
    case Type::kBool: return "true or false";
    case Type::kInt: return "an integer";
    case Type::kFloat: return "a number";
    default: return "a string";
  }
}

// A TOML value as an error quotes it: strings in quotes, escaped; tables and arrays by kind.
std::string shown_value(const toml::node& n) {
  if (const auto* s = n.as_string()) return "\"" + printable(s->get()) + "\"";
  if (n.is_table()) return "a table";
  if (n.is_array()) return "an array";
  std::ostringstream out;
  if (n.is_integer()) out << n.as_integer()->get();
  else if (n.is_floating_point()) out << n.as_floating_point()->get();
  else if (n.is_boolean()) out << (n.as_boolean()->get() ? "true" : "false");
  else return std::string("a ") + node_type_name(n);
  return out.str();
}

// `as_typed`: the value as the user wrote it, quoted in a type error ("" = show the TOML value).
void set_key(Config& c, const Key& k, const toml::node& node, const std::string& location,
             const std::string& as_typed = "") {
  Value v;
  if (!read_value(node, k.type, &v)) {
    throw ConfigError(location + ": " + k.name + ": expected " + expected_value(k.type) + ", got " +
                      (as_typed.empty() ? shown_value(node) : "'" + printable(as_typed) + "'"));
  }
  if (auto problem = k.check(v); !problem.empty()) throw ConfigError(location + ": " + k.name + " " + problem);
  k.set(c, v);
  c.locations[k.name] = location;
}

void apply_table(Config& c, const toml::table& root, const std::string& source) {
  for (auto&& [section, node] : root) {
    const std::string sname(section.str());
    const auto* table = node.as_table();
    if (!table) {
      throw ConfigError(where(source, section.source()) + ": '" + printable(sname) +
                        "' must be a section: [data] [model] [train] [pipeline] [dist] [run]");
    }
    for (auto&& [name, value] : *table) {
      const std::string full = sname + "." + std::string(name.str());
      const Key* k = find_key(full);
      if (!k) {
        const std::vector<std::string> sections(std::begin(kSections), std::end(kSections));
        const bool known_section = std::find(sections.begin(), sections.end(), sname) != sections.end();
        throw ConfigError(where(source, name.source()) + ": " +
                          (known_section ? unknown_key(full)
                                         : "unknown section [" + printable(sname) + "]" + did_you_mean(sname, sections) +
                                               " (pinfeed help config lists every key)"));
      }
      set_key(c, *k, value, where(source, value.source()));
    }
  }
}

toml::table parse_toml(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(where(source, e.source()) + ": " + std::string(e.description()));
  }
}

}  // namespace

std::optional<StepRange> parse_step_range(const std::string& text) {
  if (text.empty()) return std::nullopt;
  // Digits only (no sign, no spaces), at most 12 each: far past any run's steps, far from overflow.
  static const std::regex re("([0-9]{1,12})(-([0-9]{1,12}))?");
  std::smatch m;
  const std::string expected = "must be \"A-B\" (steps A to B, 0 <= A <= B) or \"A\", got \"" + printable(text) + "\"";
  if (!std::regex_match(text, m, re)) throw std::invalid_argument(expected);
  StepRange r;
  r.first = std::stoll(m[1].str());
  r.last = m[3].matched ? std::stoll(m[3].str()) : r.first;
  if (r.last < r.first) throw std::invalid_argument(expected);
  if (r.size() > kMaxTraceSteps) {
    throw std::invalid_argument("must span at most " + std::to_string(kMaxTraceSteps) + " steps (a megabyte or two of trace each), got \"" +
                                printable(text) + "\" (" + std::to_string(r.size()) + " steps)");
  }
  return r;
}

std::string location_of(const Config& c, const std::string& key) {
  auto it = c.locations.find(key);
  return it != c.locations.end() ? it->second : c.source + ":1:1";
}

std::string expand_user(const std::string& path) {
  if (path.rfind("~/", 0) == 0) {
    if (const char* home = std::getenv("HOME")) return std::string(home) + path.substr(1);
  }
  return path;
}

void apply_override(Config& c, const std::string& assignment) {
  const std::string source = "override '" + printable(assignment) + "'";
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(source + ":1:1: expected section.key=value");
  }
  const std::string name = assignment.substr(0, eq);
  const Key* k = find_key(name);
  if (!k) throw ConfigError(source + ":1:1: " + unknown_key(name));
  const std::string value = assignment.substr(eq + 1);
  const std::string location = source + ":1:" + std::to_string(eq + 2);
  toml::table doc;
  try {
    doc = toml::parse("v = " + value, source);
  } catch (const toml::parse_error& e) {
    // Not a TOML value: toml++'s own words ("could not determine value type") would not say which key or type.
    if (k->type != Type::kString) {
      throw ConfigError(location + ": " + k->name + ": expected " + expected_value(k->type) + ", got '" +
                        printable(value) + "'");
    }
    doc.insert("v", value);  // a bare word for a string key
  }
  // A string key takes a bare word as written even where TOML reads another type: run.name=true is the name
  // "true", data.root=nan the folder "nan".
  if (k->type == Type::kString && !doc.get("v")->is_string()) doc.insert_or_assign("v", value);
  set_key(c, *k, *doc.get("v"), location, value);
}

Config parse_config_string(const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  Config c;
  c.source = source;
  apply_table(c, parse_toml(text, source), source);
  for (const auto& o : overrides) apply_override(c, o);
  check_config(c);
  return c;
}

namespace {

// What a file of this mode is, for the message refusing it.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// The file's text, refused unless it is a regular file of at most kMaxConfigBytes. Opened non-blocking and
// checked on the open descriptor, so a FIFO cannot stall the open and a file swapped in between cannot slip by;
// the read stops at the limit whatever the size said, so /dev/zero-like files cannot exhaust memory either.
std::string read_config_file(const std::string& path) {
  const std::string fix = "; pass the path of a TOML config file (e.g. configs/quickstart.toml)";
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw ConfigError(path + ": cannot open config file: " + std::strerror(err) +
                      (err == EACCES ? " (check its permissions)" : fix));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw ConfigError(path + ": cannot stat config file: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    throw ConfigError(path + ": the config file is " + file_kind(st.st_mode) + ", not a regular file" + fix);
  }
  const std::string too_big = path + ": the config file is larger than the 1 MiB limit for a config (" +
                              std::to_string(kMaxConfigBytes) + " bytes); is this the right file?";
  if (st.st_size > kMaxConfigBytes) throw ConfigError(too_big);
  std::string text(static_cast<size_t>(kMaxConfigBytes) + 1, '\0');
  size_t have = 0;
  while (have < text.size()) {
    const ssize_t n = ::read(fd, text.data() + have, text.size() - have);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw ConfigError(path + ": cannot read config file: " + std::strerror(errno));
    }
    have += static_cast<size_t>(n);
  }
  if (have > static_cast<size_t>(kMaxConfigBytes)) throw ConfigError(too_big);
  text.resize(have);
  return text;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = read_config_file(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    // Said plainly: otherwise the first complaint would be the missing data.root, as if the file had been read.
    throw ConfigError(path + ":1:1: the config file is empty; it needs at least [data] root = \"PATH\" "
                      "(configs/quickstart.toml is a complete example; pinfeed help config lists every key)");
  }
  return parse_config_string(text, path, overrides);
}

void check_config(const Config& c) {
  auto loc = [&](const std::string& key) { return location_of(c, key); };
  if (c.data.root.empty()) {
    throw ConfigError(c.source + ":1:1: data.root is not set: point it at an ImageFolder "
                      "(or make one with pinfeed gen-data) in [data] or as data.root=PATH");
  }
  if (c.data.scale_min > c.data.scale_max) {
    throw ConfigError(loc("data.scale_min") + ": data.scale_min must not exceed data.scale_max");
  }
  if (!c.pipeline.mode.empty()) {  // the preset decides the three flags; an explicit one must agree
    const auto* preset = pipeline::find_preset(c.pipeline.mode);
    const std::pair<const char*, bool> flags[] = {
        {"pipeline.pin_memory", c.pipeline.pin_memory == preset->pin_memory},
        {"pipeline.non_blocking", c.pipeline.non_blocking == preset->non_blocking},
        {"pipeline.prefetch", c.pipeline.prefetch == pipeline::to_string(preset->prefetch)},
    };
    for (const auto& [name, agrees] : flags) {
      if (c.locations.count(name) && !agrees) {
        throw ConfigError(loc(name) + ": " + name + " contradicts pipeline.mode = \"" + c.pipeline.mode +
                          "\" (set at " + loc("pipeline.mode") + "); set one or the other");
      }
    }
  }
  const auto opts = pipeline_options(c);
  // Device-independent combination checks now; the device ones once the device is resolved.
  if (const auto problem = pipeline::check_options(opts, /*device_is_cuda=*/true)) {
    throw ConfigError(loc(c.pipeline.mode.empty() ? problem.key : "pipeline.mode") + ": " + problem.message);
  }
}

pipeline::PipelineOptions pipeline_options(const Config& c) {
  pipeline::PipelineOptions o;
  o.pin_memory = c.pipeline.pin_memory;
  o.non_blocking = c.pipeline.non_blocking;
  o.prefetch = *pipeline::parse_prefetch(c.pipeline.prefetch);
  if (!c.pipeline.mode.empty()) pipeline::apply_preset(*pipeline::find_preset(c.pipeline.mode), o);
  o.transfer_dtype = *pipeline::parse_transfer_dtype(c.pipeline.transfer_dtype);
  o.pinned_budget_mb = c.pipeline.pinned_budget_mb;
  return o;
}

std::string to_toml(const Config& config) {
  Config c = config;
  if (!c.pipeline.mode.empty()) {  // write the flags the preset stands for, so the file reads back as it ran
    const auto o = pipeline_options(c);
    c.pipeline.pin_memory = o.pin_memory;
    c.pipeline.non_blocking = o.non_blocking;
    c.pipeline.prefetch = pipeline::to_string(o.prefetch);
  }
  std::map<std::string, toml::table> sections;
  for (const auto& k : keys()) {
    const auto dot = k.name.find('.');
    auto& t = sections[k.name.substr(0, dot)];
    std::visit([&](const auto& v) { t.insert(k.name.substr(dot + 1), v); }, k.get(c));
  }
  std::ostringstream out;
  for (const char* s : {"data", "model", "train", "pipeline", "dist", "run"}) out << "[" << s << "]\n" << sections[s] << "\n\n";
  return out.str();
}

std::vector<KeyHelp> config_keys() {
  const Config defaults;
  std::vector<KeyHelp> out;
  for (const auto& k : keys()) {
    std::ostringstream d;
    std::visit([&](const auto& v) {
      using T = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<T, std::string>) d << '"' << v << '"';
      else if constexpr (std::is_same_v<T, bool>) d << (v ? "true" : "false");
      else d << v;
    }, k.get(defaults));
    out.push_back({k.name, type_name(k.type), d.str(), k.help});
  }
  return out;
}

}  // namespace pinfeed::app
