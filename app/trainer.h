// The training run: device and backend set-up, the step (forward, backward, optimizer), evaluation,
// per-epoch metrics, checkpoints and resume.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/sgd.h"
#include "model/resnet.h"
#include "pipeline/feeder.h"

namespace pinfeed::app {

// Set by SIGINT/SIGTERM; the loops finish their step, save and stop.
extern std::atomic<bool> g_stop_requested;
void install_signal_handlers();

// "auto" -> cuda if available else cpu. Throws ConfigError for a device that is not there.
c10::Device resolve_device(const Config& config);
// Throws ConfigError when the pipeline flags or precision cannot run on `device`.
void check_for_device(const Config& config, c10::Device device);
void configure_backend(const Config& config, c10::Device device);  // cuDNN benchmark, TF32

struct Datasets {
  std::shared_ptr<data::Dataset> train, val;  // val null when train.eval = false
  int64_t num_classes = 0;
};
Datasets open_datasets(const Config& config);

// Forward + backward + optimizer on one batch, in the configured precision and memory format.
class StepRunner {
 public:
  StepRunner(const Config& config, int64_t num_classes, c10::Device device);

  at::Tensor train_step(const at::Tensor& images, const at::Tensor& labels, double lr);  // loss, on device
  // Adds to sums (on device): [loss sum, top-1 correct, top-5 correct, samples].
  void eval_step(const at::Tensor& images, const at::Tensor& labels, at::Tensor& sums);

  bool graphed() const { return graphed_; }
  model::ResNet& model() { return model_; }
  Sgd& optimizer() { return *optimizer_; }
  c10::Device device() const { return device_; }

 private:
  at::Tensor forward_backward(const at::Tensor& images, const at::Tensor& labels);
  at::Tensor graphed_step(const at::Tensor& images, const at::Tensor& labels, double lr);

  model::ResNet model_{nullptr};
  std::unique_ptr<Sgd> optimizer_;
  c10::Device device_;
  bool bf16_;
  double label_smoothing_;
  // train.cuda_graph: the whole step (forward, backward, optimizer) captured once and replayed, reading the
  // batch from static device buffers and the learning rate from a device scalar.
  bool graphed_;
  std::unique_ptr<gpu::Graph> graph_;
  at::Tensor static_images_, static_labels_, static_loss_, lr_;
};

// Learning rate at a global step: linear warm-up to lr, then cosine down to min_lr.
double learning_rate(const TrainConfig& t, int64_t step, int64_t steps_per_epoch);

struct TrainArgs {
  std::string resume;  // "", a checkpoint path, or "last"
};

struct EpochResult {
  int64_t epoch = 0;
  double train_loss = 0, val_loss = 0, val_top1 = 0, val_top5 = 0;
  double samples_per_s = 0, epoch_seconds = 0;
};

struct TrainResult {
  std::string run_dir;
  std::vector<EpochResult> epochs;
  bool interrupted = false;
};

// Runs the whole training; throws ConfigError, DataError, OutputError.
TrainResult train(const Config& config, const TrainArgs& args);

}  // namespace pinfeed::app
