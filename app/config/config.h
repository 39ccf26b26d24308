// The TOML config: sections [data] [model] [train] [pipeline] [dist] [run], parsed into plain option structs.
// Only app/ sees TOML. Every key is declared once, in config.cpp's key table (type, default, check, help).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/transfer/options.h"

namespace pinfeed::app {

// A user error in a config file or override; what() starts with "file:line:col: ". Exit code 2.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct DataConfig {
  std::string root;  // ImageFolder root (ROOT/train/<class>/..., ROOT/val/<class>/...); "~/" is expanded
  std::string train_split = "train";
  std::string val_split = "val";
  int64_t image_size = 224;
  double val_resize_ratio = 0.875;
  double scale_min = 0.08;
  double scale_max = 1.0;
  bool hflip = true;
  bool crop_decode = true;
  int64_t workers = 0;  // 0: data::default_workers()
  int64_t prefetch_batches = 4;
  std::string on_bad_image = "skip";
  int64_t max_image_pixels = 100'000'000;  // data::TransformOptions::max_image_pixels; 0: no limit
  int64_t max_file_mb = 256;               // data::TransformOptions::max_file_bytes, in MiB; 0: no limit
  double sample_timeout_s = 300;           // data::LoaderOptions::sample_timeout_s; 0: no bound
  std::string decoder = "cpu";  // one of kDecoders
  double gpu_decode_share = 1.0;  // data::TransformOptions::gpu_share
};

// data.decoder's values (the key, and the --decoder flag of train and bench).
inline const std::vector<std::string> kDecoders = {"cpu", "nvjpeg", "auto"};

struct ModelConfig {
  std::string arch = "resnet50";
  int64_t num_classes = 0;  // 0: the number of class folders
  bool zero_init_residual = true;
  std::string fused_bn = "auto";  // auto | on | off: model/batch_norm.h in training (auto: CUDA, channels_last, bf16/fp16)
  std::string max_pool = "auto";  // auto | pinfeed | aten: the stem's max pool in training (pinfeed: model/max_pool.h)
  std::string pad_input = "auto";  // auto | on | off: the input as fp16 RGB + a zero channel (model/resnet.h)
  std::string fold_grad_add = "auto";  // auto | on | off: block-input gradient sums inside a GEMM (model/conv_fork.h)
  std::string bn_graph = "auto";  // auto | small | conv | all | off: fused BN + ReLU through the cuDNN frontend (model/batch_norm.h)
};

struct TrainConfig {
  int64_t epochs = 90;
  int64_t batch_size = 256;
  double lr = 0.1;
  int64_t lr_reference_batch = 0;  // 0: lr as given; B: lr (and min_lr) are per B samples, scaled by global batch / B
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 1e-4;
  bool decay_bn_and_bias = true;  // false: no weight decay on BN parameters and biases
  double warmup_epochs = 0;
  double min_lr = 0;
  double label_smoothing = 0;
  std::string precision = "tf32";  // fp32 | tf32 | bf16 | fp16 (autocast; fp16 with loss scaling); CUDA only beyond fp32
  double loss_scale_init = 65536;        // fp16: the dynamic loss scale's first value
  int64_t loss_scale_growth_interval = 2000;  // fp16: good steps in a row before the scale doubles
  bool channels_last = false;
  bool cudnn_benchmark = true;
  bool cuda_graph = false;  // capture the training step once, replay it every step
  int64_t seed = 0;
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  int64_t max_steps_per_epoch = 0;  // 0: the whole epoch
  bool eval = true;
  std::string init_from;  // a new run starts from this file's weights (a checkpoint or a state dict); "" = none
};

struct PipelineConfig {
  std::string mode;  // a preset, or "" to use the flags below
  bool pin_memory = false;
  bool non_blocking = false;
  std::string prefetch = "none";
  std::string transfer_dtype = "float32";
  int64_t pinned_budget_mb = 0;
  int64_t warmup_steps = 10;  // per epoch, excluded from wait/idle/samples-per-s figures
  int64_t max_steps_ahead = 2;  // the host runs at most this many steps ahead of the GPU; 0 = no limit
};

// Data-parallel training (several ranks under torchrun); ignored when the world size is 1.
struct DistConfig {
  std::string backend = "auto";  // auto (nccl on CUDA, gloo on the CPU) | nccl | gloo
  double bucket_mb = 25;         // gradients all-reduced per bucket, as DDP's bucket_cap_mb
  bool overlap = true;           // all-reduce each bucket during backward; false: after it (for measuring)
  int64_t timeout_s = 300;       // bound on joining the group and on every collective
};

struct RunConfig {
  std::string name = "run";
  std::string dir = "runs";
  bool log_steps = false;
  std::string trace_steps;  // "A-B": a Kineto trace of global steps A to B (app/step/step_trace.h); "" = none
  int64_t checkpoint_every = 1;  // epochs
  double progress_interval_s = 10;  // progress line period when not on a terminal
};

struct Config {
  DataConfig data;
  ModelConfig model;
  TrainConfig train;
  PipelineConfig pipeline;
  DistConfig dist;
  RunConfig run;
  std::string source;                            // the file it came from
  std::map<std::string, std::string> locations;  // key -> "file:line:col" where it was set
};

// Parses a file (a regular file of at most kMaxConfigBytes), then applies overrides "section.key=value" (TOML
// value syntax; for a string key, a value that is not a TOML string is taken as written: run.name=true is
// "true"), then checks the whole. Throws ConfigError.
constexpr int64_t kMaxConfigBytes = 1 << 20;  // 1 MiB: a config is a few KB; more is the wrong file
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
Config parse_config_string(const std::string& text, const std::string& source_name,
                           const std::vector<std::string>& overrides = {});
void apply_override(Config& config, const std::string& assignment);
void check_config(const Config& config);  // cross-key checks
// "file:line:col" where `key` was set, else the config file itself (for errors about a default value).
std::string location_of(const Config& config, const std::string& key);

std::string to_toml(const Config& config);  // the resolved config, every key

struct KeyHelp {
  std::string name, type, default_value, help;
};
std::vector<KeyHelp> config_keys();

// Consecutive step numbers, both ends included: run.trace_steps, bench --trace-steps.
struct StepRange {
  int64_t first = 0, last = 0;
  int64_t size() const { return last - first + 1; }
  std::string text() const { return std::to_string(first) + "-" + std::to_string(last); }
};
// A ResNet-50 step is on the order of a thousand kernels and as many launches in a trace, a megabyte or two: a
// bound on the file, and on the memory the profiler holds until it writes it.
constexpr int64_t kMaxTraceSteps = 1000;
// "A-B" (or "A": one step) -> the range; "" -> nullopt. Throws std::invalid_argument saying what is wrong
// ("must be ..., got ..."), for the caller to prefix with the key or flag.
std::optional<StepRange> parse_step_range(const std::string& text);

// The transfer flags the config stands for: pipeline.mode's preset applied over the three flags. The rest of
// the translation into option structs is app/plan/plan.h's.
pipeline::PipelineOptions pipeline_options(const Config& c);
std::string expand_user(const std::string& path);

}  // namespace pinfeed::app
