// The TOML config: sections [data] [model] [train] [pipeline] [dist] [run]. Each key writes one field of the
// struct that consumes it (app/config/keys.cpp binds them, once); a field's default is the key's default. A
// key's field holds what was written; resolve_plan (app/plan/plan.h) puts its answers to "auto" elsewhere. Only
// app/ sees TOML.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/optim/lr_schedule.h"
#include "engine/step/step_options.h"
#include "engine/step/step_trace.h"
#include "data/dataset/dataset.h"
#include "data/loader/loader.h"
#include "data/transform/transforms.h"
#include "model/batch_norm.h"
#include "pipeline/augment/options.h"
#include "pipeline/resolve_feed.h"
#include "pipeline/transfer/options.h"

namespace pinfeed::app {

// A user error in a config file or override; what() starts with "file:line:col: ". Exit code 2.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The dataset's folders and what a bad image does (app/plan/datasets.cpp opens it).
struct DatasetOptions {
  std::string root;  // ImageFolder root (ROOT/train/<class>/..., ROOT/val/<class>/...); "~/" expanded
  std::string train_split = "train";
  std::string val_split = "val";
  data::BadImagePolicy on_bad_image = data::BadImagePolicy::kSkip;
  pipeline::Decoder decoder = pipeline::Decoder::kAuto;  // resolve_plan answers it in TransformOptions::gpu_decode
};

// model.*'s choices of kernels, nullopt = "auto": resolve_plan answers them in StepOptions::net.
struct ModelOptions {
  int64_t num_classes = 0;  // 0: the number of class folders
  bool allow_extra_classes = false;  // num_classes above the class folders' count, on purpose
  std::optional<bool> fused_bn, stem_max_pool, pad_input, fold_grad_add;
  std::optional<model::GraphBatchNorm> bn_graph;
};

// The training run's own terms beyond the step's, the loaders' and the schedule's (app/train/).
struct TrainOptions {
  std::string device = "auto";      // auto | cpu | cuda | cuda:N; resolve_plan answers it in Plan::device
  // nullopt: "auto"; resolve_plan answers both in StepOptions (channels_last on CUDA; a graph where the step can
  // be captured: CUDA, one rank).
  std::optional<bool> channels_last, cuda_graph;
  bool cudnn_benchmark = true;      // configure_backend
  int64_t max_steps_per_epoch = 0;  // 0: every batch of the epoch
  bool eval = true;                 // evaluate on the val split after each epoch
  std::string init_from;            // a new run's starting weights, "~/" expanded; "" = none
};

// The run's folder and what it writes there (app/run/).
struct RunOptions {
  std::string name = "run";         // a new run's folder is <dir>/<timestamp>-<name>
  std::string dir = "runs";         // where run folders are made and `--resume last` looks
  bool log_steps = false;           // rank 0 writes each step's row to steps.jsonl
  std::optional<engine::StepRange> trace_steps;  // global steps to record a Kineto trace of; nullopt: none
  int64_t checkpoint_every = 1;     // last.pt every this many epochs (and after the last)
  double progress_interval_s = 10;  // the progress line's period when not on a terminal
};

// dist.backend: resolve_plan answers kAuto in Plan::backend (nccl on CUDA, gloo on the CPU).
enum class Backend { kAuto, kNccl, kGloo };

// Data-parallel training (several ranks under torchrun); ignored when the world size is 1.
struct DistOptions {
  Backend backend = Backend::kAuto;
  int64_t timeout_s = 300;  // bound on joining the group and on every collective
  bool one_rank_group = false;  // one rank: a group all the same, the gradient all-reduce run through it
  std::chrono::seconds timeout() const { return std::chrono::seconds(timeout_s); }
};

// Per-epoch step loop terms (engine/step/step_loop.h takes them).
struct LoopOptions {
  int64_t warmup_steps = 10;  // per epoch, left out of the wait/idle/samples-per-s figures
  int max_steps_ahead = 2;    // the host runs at most this many steps ahead of the GPU; 0 = no limit
};

struct Config {
  DatasetOptions dataset;
  data::TransformOptions transform;   // its pixel format and gpu_decode answered by resolve_plan
  pipeline::augment::AugmentOptions augment;  // the training Feeder's; num_classes, label_smoothing: train_augment
  data::LoaderOptions train_loader;   // the validation loader is derived from it (app/plan/plan.cpp)
  ModelOptions model;
  engine::StepOptions step;
  engine::LrSchedule schedule;
  TrainOptions train;
  pipeline::PipelineOptions pipeline;  // pipeline.mode's preset already applied to the flags
  LoopOptions loop;
  DistOptions dist;
  RunOptions run;

  std::string source;                            // the file it came from
  std::map<std::string, std::string> locations;  // key -> "file:line:col" where it was set
};

// Parses a file (a regular file of at most kMaxConfigBytes), then applies overrides "section.key=value" (TOML
// value syntax; for a string key, a value that is not a TOML string is taken as written: run.name=true is
// "true"), then applies pipeline.mode's preset and checks the whole. Throws ConfigError.
constexpr int64_t kMaxConfigBytes = 1 << 20;  // 1 MiB: a config is a few KB; more is the wrong file
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
Config parse_config_string(const std::string& text, const std::string& source_name,
                           const std::vector<std::string>& overrides = {});
void apply_override(Config& config, const std::string& assignment);
// "file:line:col" where `key` was set, else the config file itself (for errors about a default value).
std::string location_of(const Config& config, const std::string& key);
// Whether `key` was set by an override (apply_override) rather than by the config file or its default.
bool set_by_override(const Config& config, const std::string& key);
// A key's value as a config file writes it, for messages: "fp16" (quoted), true, 0.1.
std::string value_text(const Config& config, const std::string& key);

std::string to_toml(const Config& config);  // every key's value, as a config file that reads back the same
std::string to_json(const Config& config);  // every key's value as {"section": {"key": value}}: `pinfeed help config --json`

struct KeyHelp {
  std::string name, type, default_value, help;
};
std::vector<KeyHelp> config_keys();
std::string config_keys_markdown();  // docs/config-keys.md's table: `pinfeed help config --markdown`

// A ResNet-50 step is on the order of a thousand kernels and as many launches in a trace, a megabyte or two: a
// bound on the file, and on the memory the profiler holds until it writes it.
constexpr int64_t kMaxTraceSteps = 1000;
// "A-B" (or "A": one step) -> the range; "" -> nullopt. Throws std::invalid_argument saying what is wrong
// ("must be ..., got ..."), for the caller to prefix with the key or flag.
std::optional<engine::StepRange> parse_step_range(const std::string& text);

std::string expand_user(const std::string& path);

// The names each enum-valued key reads and writes; logs and messages use the same (app/config/keys.cpp).
const char* name_of(engine::Precision precision);
const char* name_of(pipeline::Decoder decoder);
const char* name_of(Backend backend);

}  // namespace pinfeed::app
