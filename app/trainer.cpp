#include "app/trainer.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/zeros.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "app/checkpoint.h"
#include "app/run_files.h"
#include "data/error.h"
#include "data/log.h"
#include "pipeline/step_meter.h"

namespace pinfeed::app {
namespace fs = std::filesystem;

std::atomic<bool> g_stop_requested{false};

namespace {

extern "C" void on_stop_signal(int sig) {
  g_stop_requested = true;
  std::signal(sig, SIG_DFL);  // a second Ctrl-C stops at once
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// bf16 autocast on CUDA for the forward pass, as torch.autocast("cuda", dtype=torch.bfloat16).
class AutocastScope {
 public:
  // cache: reuse each weight's bf16 copy within the scope; off under CUDA graph capture (as torch.cuda.graph
  // requires), where a cached copy would outlive the capture.
  explicit AutocastScope(bool on, bool cache = true) : on_(on) {
    if (!on_) return;
    at::autocast::set_autocast_cache_enabled(cache);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::set_autocast_cache_enabled(true);
  }

 private:
  bool on_;
};

std::vector<std::pair<std::string, at::Tensor>> named_parameters(const model::ResNet& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : m->named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

// BN weights and biases and every bias: the parameters of dimension 1.
std::vector<std::string> no_decay_names(const model::ResNet& m) {
  std::vector<std::string> out;
  for (const auto& item : m->named_parameters()) {
    if (item.value().dim() <= 1) out.push_back(item.key());
  }
  return out;
}

std::string fmt_ms(double v) {
  if (std::isnan(v)) return "n/a";
  std::ostringstream s;
  s.precision(v < 1 ? 3 : 4);
  s << v;
  return s.str();
}

nlohmann::json num_or_null(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

// Resident host memory of this process, MiB (pinned buffers included), to show it does not grow.
double host_rss_mb() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * sysconf(_SC_PAGESIZE) / (1 << 20);
}

}  // namespace

void install_signal_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

c10::Device resolve_device(const Config& c) {
  const std::string& d = c.train.device;
  const std::string loc = location_of(c, "train.device");
  if (d == "auto") return gpu::available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  if (d == "cpu") return c10::Device(c10::kCPU);
  if (!gpu::available()) {
    throw ConfigError(loc + ": train.device = \"" + d + "\" but no CUDA device is available" +
                      (gpu::compiled_with_cuda() ? "" : " (this build's LibTorch has no CUDA)"));
  }
  c10::Device device(d);
  if (!device.has_index()) device = c10::Device(c10::kCUDA, 0);
  if (device.index() >= static_cast<int>(torch::cuda::device_count())) {
    throw ConfigError(loc + ": train.device = \"" + d + "\" but only " + std::to_string(torch::cuda::device_count()) +
                      " CUDA device(s) exist");
  }
  return device;
}

void check_for_device(const Config& c, c10::Device device) {
  auto loc = [&](const std::string& key) { return location_of(c, key); };
  const auto problem = pipeline::check_options(pipeline_options(c), device.is_cuda());
  if (!problem.empty()) {
    std::string key = problem.substr(0, problem.find(' '));
    if (!c.pipeline.mode.empty()) key = "pipeline.mode";
    throw ConfigError(loc(key) + ": " + problem);
  }
  if (!device.is_cuda() && c.train.cuda_graph) {
    throw ConfigError(loc("train.cuda_graph") + ": train.cuda_graph = true needs a CUDA device (device is cpu)");
  }
  if (!device.is_cuda() && c.train.precision == "bf16") {
    throw ConfigError(loc("train.precision") + ": train.precision = \"bf16\" needs a CUDA device (device is cpu)");
  }
}

void configure_backend(const Config& c, c10::Device device) {
  if (!device.is_cuda()) return;
  auto& ctx = at::globalContext();
  ctx.setBenchmarkCuDNN(c.train.cudnn_benchmark);
  const bool tf32 = c.train.precision != "fp32";  // bf16 autocast leaves some fp32 matmuls; TF32 them too
  ctx.setAllowTF32CuBLAS(tf32);
  ctx.setAllowTF32CuDNN(tf32);
}

Datasets open_datasets(const Config& c) {
  const std::string root = expand_user(c.data.root);
  const bool u8 = pipeline_options(c).transfer_dtype == pipeline::TransferDtype::kUint8;
  const auto transform = transform_options(c, u8);
  Datasets d;
  auto train_folder = data::scan_image_folder(root, c.data.train_split);
  d.num_classes = c.model.num_classes > 0 ? c.model.num_classes : static_cast<int64_t>(train_folder.classes.size());
  if (d.num_classes < static_cast<int64_t>(train_folder.classes.size())) {
    throw ConfigError(location_of(c, "model.num_classes") + ": model.num_classes = " + std::to_string(d.num_classes) +
                      " but " + root + " has " + std::to_string(train_folder.classes.size()) + " classes");
  }
  if (c.train.eval) {
    auto val_folder = data::scan_image_folder(root, c.data.val_split, &train_folder.classes);
    d.val = std::make_shared<data::Dataset>(std::move(val_folder), transform, false, bad_image_policy(c));
  }
  d.train = std::make_shared<data::Dataset>(std::move(train_folder), transform, true, bad_image_policy(c));
  return d;
}

StepRunner::StepRunner(const Config& c, int64_t num_classes, c10::Device device)
    : device_(device), bf16_(device.is_cuda() && c.train.precision == "bf16"),
      label_smoothing_(c.train.label_smoothing), graphed_(device.is_cuda() && c.train.cuda_graph) {
  at::manual_seed(static_cast<uint64_t>(c.train.seed));
  model_ = model::resnet50({num_classes, c.model.zero_init_residual});
  model_->to(device);
  if (c.train.channels_last) {
    at::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(c10::MemoryFormat::ChannelsLast));
    }
  }
  const auto no_decay = c.train.decay_bn_and_bias ? std::vector<std::string>{} : no_decay_names(model_);
  optimizer_ = std::make_unique<Sgd>(named_parameters(model_), no_decay,
                                     SgdOptions{c.train.momentum, c.train.nesterov, c.train.weight_decay});
}

at::Tensor StepRunner::forward_backward(const at::Tensor& images, const at::Tensor& labels) {
  optimizer_->zero_grad();
  at::Tensor loss;
  {
    AutocastScope autocast(bf16_, /*cache=*/!graphed_);
    const at::Tensor logits = model_->forward(images);
    loss = at::cross_entropy_loss(logits, labels, {}, at::Reduction::Mean, -100, label_smoothing_);
  }
  loss.backward();
  return loss.detach();
}

at::Tensor StepRunner::train_step(const at::Tensor& images, const at::Tensor& labels, double lr) {
  const bool fits = !graph_ || (images.sizes() == static_images_.sizes() && images.strides() == static_images_.strides());
  if (!graphed_ || !fits) {  // eager (and any batch of another shape than the captured one)
    at::Tensor loss = forward_backward(images, labels);
    optimizer_->step(lr);
    return loss;
  }
  return graphed_step(images, labels, lr);
}

at::Tensor StepRunner::graphed_step(const at::Tensor& images, const at::Tensor& labels, double lr) {
  if (!graph_) {
    static_images_ = at::empty_like(images);
    static_labels_ = at::empty_like(labels);
    lr_ = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kFloat));
    static_images_.copy_(images);
    static_labels_.copy_(labels);
    graph_ = std::make_unique<gpu::Graph>();
    // Warm-up steps run with lr 0 (weights unchanged); their momentum is then cleared, so the first replay
    // is the first real step. They do update BN running statistics three times on this batch.
    graph_->capture(device_, 3, [this] {
      static_loss_ = forward_backward(static_images_, static_labels_);
      optimizer_->step(lr_);
    });
    optimizer_->zero_momentum();
  } else {
    static_images_.copy_(images);
    static_labels_.copy_(labels);
  }
  lr_.fill_(lr);
  graph_->replay();
  return static_loss_;
}

void StepRunner::eval_step(const at::Tensor& images, const at::Tensor& labels, at::Tensor& sums) {
  at::NoGradGuard no_grad;
  AutocastScope autocast(bf16_);
  const at::Tensor logits = model_->forward(images).to(at::kFloat);
  const at::Tensor loss = at::cross_entropy_loss(logits, labels, {}, at::Reduction::Sum);
  const int64_t k = std::min<int64_t>(5, logits.size(1));
  const at::Tensor hits = std::get<1>(logits.topk(k, 1)).eq(labels.unsqueeze(1));
  sums[0] += loss;
  sums[1] += hits.narrow(1, 0, 1).sum();
  sums[2] += hits.sum();
  sums[3] += labels.size(0);
}

double learning_rate(const TrainConfig& t, int64_t step, int64_t steps_per_epoch) {
  const double warmup = t.warmup_epochs * steps_per_epoch;
  const double total = static_cast<double>(t.epochs) * steps_per_epoch;
  if (step < warmup) return t.lr * (step + 1) / warmup;
  const double progress = total > warmup ? (step - warmup) / (total - warmup) : 1.0;
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1 + std::cos(M_PI * std::min(1.0, progress)));
}

namespace {

// The progress line: redrawn on a terminal, printed every few seconds otherwise.
class Progress {
 public:
  Progress(double interval_s) : tty_(::isatty(STDERR_FILENO)), interval_(tty_ ? 0.5 : interval_s) {}
  bool due() const { return seconds_since(last_) >= interval_; }
  void show(const std::string& line) {
    log::status(line, tty_);
    last_ = Clock::now();
  }
  void end() {
    if (tty_) log::status("", false);
  }

 private:
  bool tty_;
  double interval_;
  Clock::time_point last_ = Clock::now();
};

// Mean training loss of the epoch, kept on the device; read without stalling the GPU: a snapshot is
// copied asynchronously and shown one progress tick later.
class LossMeter {
 public:
  explicit LossMeter(c10::Device device) : device_(device) {}
  void reset() {
    sum_ = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kFloat));
    count_ = 0;
    shown_ = NAN;
    snapshot_ = at::Tensor();
  }
  void add(const at::Tensor& loss) {
    sum_.add_(loss.to(at::kFloat));
    ++count_;
  }
  double latest() {  // the newest snapshot that has arrived; NaN before the first
    if (!device_.is_cuda()) return count_ ? sum_.item<double>() / count_ : NAN;
    if (snapshot_.defined() && ready_->query()) {
      shown_ = snapshot_.item<double>() / snapshot_count_;
      snapshot_ = at::Tensor();
    }
    if (!snapshot_.defined() && count_) {
      snapshot_ = sum_.to(at::kCPU, /*non_blocking=*/true);
      snapshot_count_ = count_;
      ready_ = std::make_shared<gpu::Event>();
      ready_->record(gpu::current_stream(device_));
    }
    return shown_;
  }
  double mean() const { return count_ ? sum_.item<double>() / count_ : NAN; }  // synchronises

 private:
  c10::Device device_;
  at::Tensor sum_, snapshot_;
  int64_t count_ = 0, snapshot_count_ = 0;
  double shown_ = NAN;
  std::shared_ptr<gpu::Event> ready_;
};

std::string eta_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  const int64_t s = static_cast<int64_t>(seconds);
  std::ostringstream o;
  if (s >= 3600) o << s / 3600 << "h";
  o << (s % 3600) / 60 << "m" << s % 60 << "s";
  return o.str();
}

struct EvalResult {
  double loss = NAN, top1 = NAN, top5 = NAN;
};

EvalResult evaluate(StepRunner& runner, pipeline::Feeder& feeder) {
  runner.model()->eval();
  at::Tensor sums = at::zeros({4}, at::TensorOptions().device(runner.device()).dtype(at::kDouble));
  feeder.start_epoch(0);
  while (auto b = feeder.next()) {
    runner.eval_step(b->images, b->labels, sums);
    if (g_stop_requested) break;
  }
  runner.model()->train();
  const at::Tensor s = sums.cpu();
  const double n = s[3].item<double>();
  if (n == 0) return {};
  return {s[0].item<double>() / n, s[1].item<double>() / n, s[2].item<double>() / n};
}

// The run's outputs: resolved config, metrics.csv, metrics.jsonl, steps.jsonl, last.pt.
class RunOutputs {
 public:
  RunOutputs(const Config& c, const std::string& dir) : dir_(dir) {
    write_file_atomic(path("config.toml"), to_toml(c));
    csv_ = AppendFile(path("metrics.csv"));
    jsonl_ = AppendFile(path("metrics.jsonl"));
    if (c.run.log_steps) steps_ = AppendFile(path("steps.jsonl"));
    if (csv_.empty()) {
      std::string header;
      for (const char* column : kCsvColumns) header += (header.empty() ? "" : ",") + std::string(column);
      csv_.append(header);
    }
  }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  void epoch(const nlohmann::json& row) {
    std::ostringstream line;
    bool first = true;
    for (const char* key : kCsvColumns) {
      line << (first ? "" : ",");
      first = false;
      const auto& v = row.at(key);
      if (v.is_null()) continue;  // not applicable: an empty field, never a zero
      if (v.is_string()) line << v.get<std::string>();
      else line << v.dump();
    }
    csv_.append(line.str());
    jsonl_.append(row.dump());
  }
  void steps(int64_t epoch, const std::vector<pipeline::StepRecord>& records) {
    if (!steps_.is_open()) return;
    for (const auto& r : records) {
      steps_.append(nlohmann::json{{"epoch", epoch}, {"step", r.step}, {"samples", r.samples}, {"warmup", r.warmup},
                                   {"wait_ms", r.wait_ms}, {"loader_ms", r.loader_ms}, {"ahead_ms", num_or_null(r.ahead_ms)},
                                   {"h2d_ms", num_or_null(r.h2d_ms)},
                                   {"compute_ms", num_or_null(r.compute_ms)}}.dump(),
                    /*sync=*/false);
    }
  }

  static constexpr const char* kCsvColumns[] = {
      "epoch", "lr", "train_loss", "val_loss", "val_top1", "val_top5", "samples_per_s", "epoch_s", "steps",
      "warmup_steps", "wait_ms_mean", "wait_ms_p50", "wait_ms_p95", "loader_ms_mean", "ahead_ms_mean", "h2d_ms_mean",
      "compute_ms_mean",
      "gpu_idle", "mode", "pinned_mb", "host_rss_mb", "workers", "bad_images"};
 private:
  std::string dir_;
  AppendFile csv_, jsonl_, steps_;
};

Checkpoint make_checkpoint(StepRunner& runner, const Config& c, int64_t epoch, int64_t step_in_epoch,
                           int64_t global_step) {
  Checkpoint ck;
  for (const auto& item : runner.model()->named_parameters()) ck.model[item.key()] = item.value();
  for (const auto& item : runner.model()->named_buffers()) ck.model[item.key()] = item.value();
  ck.optimizer = runner.optimizer().state();
  ck.epoch = epoch;
  ck.step_in_epoch = step_in_epoch;
  ck.global_step = global_step;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  ck.torch_rng = generator.get_state();
  ck.config = to_toml(c);
  return ck;
}

void restore_checkpoint(StepRunner& runner, const Checkpoint& ck) {
  at::NoGradGuard no_grad;
  auto restore = [&](const std::string& name, at::Tensor& t) {
    auto it = ck.model.find(name);
    if (it == ck.model.end()) throw std::runtime_error("checkpoint lacks " + name);
    if (it->second.sizes() != t.sizes()) throw std::runtime_error("checkpoint shape mismatch for " + name);
    t.copy_(it->second);
  };
  for (auto& item : runner.model()->named_parameters()) restore(item.key(), item.value());
  for (auto& item : runner.model()->named_buffers()) restore(item.key(), item.value());
  runner.optimizer().load_state(ck.optimizer);
  if (ck.torch_rng.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(ck.torch_rng);
  }
}

std::string resume_path(const Config& c, const std::string& resume) {
  if (resume != "last") return resume;
  const std::string run = find_last_run(c.run.dir, c.run.name);
  if (run.empty()) {
    throw ConfigError("--resume last: no run named '" + c.run.name + "' with a last.pt under " + c.run.dir);
  }
  return (fs::path(run) / "last.pt").string();
}

}  // namespace

namespace {

// One run's moving parts, so that the epoch loop reads as steps: train an epoch, evaluate, report, save.
class Training {
 public:
  Training(const Config& c, c10::Device device, Datasets sets)
      : c_(c), device_(device), sets_(std::move(sets)),
        train_feed_(sets_.train, loader_options(c, true), pipeline_options(c), feeder_options(c, device)),
        runner_(c, sets_.num_classes, device),
        meter_(device),
        losses_(device), progress_(c.run.progress_interval_s) {
    if (sets_.val) {
      val_feed_ = std::make_unique<pipeline::Feeder>(sets_.val, loader_options(c, false), pipeline_options(c),
                                                     feeder_options(c, device));
    }
    steps_per_epoch_ = c.train.max_steps_per_epoch > 0
                           ? std::min(c.train.max_steps_per_epoch, train_feed_.batches_per_epoch())
                           : train_feed_.batches_per_epoch();
  }

  // Restores a checkpoint; returns where to continue: (epoch, step in that epoch).
  std::pair<int64_t, int64_t> resume(const Checkpoint& ck) {
    restore_checkpoint(runner_, ck);
    global_step_ = ck.global_step;
    return {ck.epoch, ck.step_in_epoch};
  }

  void run(RunOutputs& out, int64_t start_epoch, int64_t start_step, TrainResult& result) {
    log::info("run " + result.run_dir + ": " + std::to_string(sets_.train->size()) + " train images, " +
              std::to_string(sets_.num_classes) + " classes, device " + device_.str() + ", mode " +
              train_feed_.mode() + " (transfer " + c_.pipeline.transfer_dtype + "), " +
              std::to_string(train_feed_.workers()) + " workers, " + std::to_string(steps_per_epoch_) +
              " steps/epoch, precision " + c_.train.precision + (runner_.graphed() ? ", CUDA graph" : ""));
    runner_.model()->train();
    for (int64_t epoch = start_epoch; epoch < c_.train.epochs; ++epoch) {
      const auto t0 = Clock::now();
      const int64_t first = epoch == start_epoch ? start_step : 0;
      const EpochProgress p = train_epoch(out, epoch, first);
      if (g_stop_requested) {
        save_checkpoint(out.path("last.pt"), make_checkpoint(runner_, c_, epoch, p.step, global_step_));
        log::warn("interrupted: saved " + out.path("last.pt") + " at epoch " + std::to_string(epoch + 1) + " step " +
                  std::to_string(p.step) + "; continue with --resume " + out.path("last.pt"));
        result.interrupted = true;
        return;
      }
      EpochResult er{epoch + 1, losses_.mean(), NAN, NAN, NAN, p.timing.samples_per_s, 0};
      if (val_feed_) {
        const EvalResult ev = evaluate(runner_, *val_feed_);
        er.val_loss = ev.loss;
        er.val_top1 = ev.top1;
        er.val_top5 = ev.top5;
      }
      er.epoch_seconds = seconds_since(t0);
      result.epochs.push_back(er);
      report(out, er, p);
      if (epoch + 1 == c_.train.epochs || (epoch + 1) % c_.run.checkpoint_every == 0) {
        save_checkpoint(out.path("last.pt"), make_checkpoint(runner_, c_, epoch + 1, 0, global_step_));
      }
      if (g_stop_requested) {
        result.interrupted = true;
        return;
      }
    }
  }

 private:
  struct EpochProgress {
    int64_t step = 0, bad_images = 0;
    double lr = 0;
    pipeline::EpochTiming timing;
  };

  static pipeline::FeederOptions feeder_options(const Config& c, c10::Device device) {
    pipeline::FeederOptions fo;
    fo.device = device;
    fo.channels_last = c.train.channels_last;
    return fo;
  }

  EpochProgress train_epoch(RunOutputs& out, int64_t epoch, int64_t first) {
    const int64_t warmup = std::min<int64_t>(c_.pipeline.warmup_steps, (steps_per_epoch_ - first) / 4);
    train_feed_.start_epoch(epoch, first);
    meter_.start_epoch(warmup);
    losses_.reset();
    EpochProgress p;
    p.step = first;
    p.lr = learning_rate(c_.train, global_step_, steps_per_epoch_);
    auto rate_t0 = Clock::now();
    int64_t rate_samples = 0;
    while (p.step < steps_per_epoch_ && !g_stop_requested) {
      meter_.hold_back(static_cast<int>(c_.pipeline.max_steps_ahead));
      auto batch = train_feed_.next();
      if (!batch) break;
      p.lr = learning_rate(c_.train, global_step_, steps_per_epoch_);
      meter_.begin_step();
      losses_.add(runner_.train_step(batch->images, batch->labels, p.lr));
      meter_.end_step(batch->size, batch->timing);
      out.steps(epoch, meter_.take_resolved());
      ++p.step;
      ++global_step_;
      p.bad_images += batch->bad_images;
      rate_samples += batch->size;
      if (progress_.due()) {
        show_progress(epoch, p, rate_samples / seconds_since(rate_t0));
        rate_t0 = Clock::now();
        rate_samples = 0;
      }
    }
    p.timing = meter_.finish_epoch();
    out.steps(epoch, meter_.take_resolved(true));
    progress_.end();
    return p;
  }

  void show_progress(int64_t epoch, const EpochProgress& p, double rate) {
    const double left = (steps_per_epoch_ - p.step + (c_.train.epochs - epoch - 1) * steps_per_epoch_);
    std::ostringstream line;
    line << "epoch " << epoch + 1 << "/" << c_.train.epochs << " step " << p.step << "/" << steps_per_epoch_ << " | "
         << static_cast<int64_t>(rate) << " samples/s | loss " << fmt_ms(losses_.latest()) << " | lr " << p.lr
         << " | ETA " << eta_text(left * c_.train.batch_size / rate);
    progress_.show(line.str());
  }

  void report(RunOutputs& out, const EpochResult& er, const EpochProgress& p) {
    const pipeline::EpochTiming& t = p.timing;
    out.epoch({{"epoch", er.epoch}, {"lr", p.lr}, {"train_loss", num_or_null(er.train_loss)},
               {"val_loss", num_or_null(er.val_loss)}, {"val_top1", num_or_null(er.val_top1)},
               {"val_top5", num_or_null(er.val_top5)}, {"samples_per_s", num_or_null(t.samples_per_s)},
               {"epoch_s", er.epoch_seconds}, {"steps", t.steps}, {"warmup_steps", t.warmup_steps},
               {"wait_ms_mean", num_or_null(t.wait_ms.mean)}, {"wait_ms_p50", num_or_null(t.wait_ms.p50)},
               {"wait_ms_p95", num_or_null(t.wait_ms.p95)}, {"loader_ms_mean", num_or_null(t.loader_ms.mean)},
               {"ahead_ms_mean", num_or_null(t.ahead_ms.mean)}, {"h2d_ms_mean", num_or_null(t.h2d_ms.mean)},
               {"compute_ms_mean", num_or_null(t.compute_ms.mean)}, {"gpu_idle", num_or_null(t.gpu_idle)},
               {"mode", train_feed_.mode()},
               {"pinned_mb", static_cast<double>(train_feed_.pinned_bytes()) / (1 << 20)}, {"host_rss_mb", host_rss_mb()},
               {"workers", train_feed_.workers()}, {"bad_images", p.bad_images}});
    std::ostringstream line;
    line.precision(4);
    line << "epoch " << er.epoch << "/" << c_.train.epochs << ": train_loss " << er.train_loss << " val_loss "
         << er.val_loss << " top1 " << er.val_top1 << " top5 " << er.val_top5 << " | " << t.samples_per_s
         << " samples/s, " << er.epoch_seconds << " s | wait ms mean " << fmt_ms(t.wait_ms.mean) << " p50 "
         << fmt_ms(t.wait_ms.p50) << " p95 " << fmt_ms(t.wait_ms.p95) << " (loader " << fmt_ms(t.loader_ms.mean)
         << ") | ahead ms " << fmt_ms(t.ahead_ms.mean) << " | h2d ms " << fmt_ms(t.h2d_ms.mean)
         << " | GPU idle " << (std::isnan(t.gpu_idle) ? std::string("n/a") : fmt_ms(100 * t.gpu_idle) + "%")
         << " | mode " << train_feed_.mode() << ", pinned " << train_feed_.pinned_bytes() / (1 << 20) << " MB, RSS "
         << static_cast<int64_t>(host_rss_mb()) << " MB"
         << (p.bad_images ? ", bad images " + std::to_string(p.bad_images) : "");
    log::info(line.str());
  }

  const Config& c_;
  c10::Device device_;
  Datasets sets_;
  pipeline::Feeder train_feed_;
  std::unique_ptr<pipeline::Feeder> val_feed_;
  StepRunner runner_;
  pipeline::StepMeter meter_;
  LossMeter losses_;
  Progress progress_;
  int64_t steps_per_epoch_ = 0;
  int64_t global_step_ = 0;
};

}  // namespace

TrainResult train(const Config& c, const TrainArgs& args) {
  const c10::Device device = resolve_device(c);
  check_for_device(c, device);
  configure_backend(c, device);
  Training training(c, device, open_datasets(c));
  TrainResult result;
  int64_t start_epoch = 0, start_step = 0;
  if (!args.resume.empty()) {
    const std::string ck_path = resume_path(c, args.resume);
    std::tie(start_epoch, start_step) = training.resume(load_checkpoint(ck_path));
    result.run_dir = fs::path(ck_path).parent_path().string();
    log::info("resuming from " + ck_path + " at epoch " + std::to_string(start_epoch + 1) + ", step " +
              std::to_string(start_step));
  } else {
    result.run_dir = make_run_dir(c.run.dir, c.run.name);
  }
  RunOutputs out(c, result.run_dir);
  training.run(out, start_epoch, start_step, result);
  return result;
}

}  // namespace pinfeed::app
