// One training step (forward, backward, optimizer) and one evaluation step, in the precision and memory format
// of its StepOptions (a plan's `step`); with train.cuda_graph the whole training step is captured once and
// replayed.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/dist/distributed.h"
#include "engine/dist/grad_sync.h"
#include "engine/optim/ema.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/optimizer.h"
#include "engine/step/step_options.h"
#include "model/resnet.h"
#include "gpu/gpu.h"

namespace pinfeed::engine {

class StepRunner {
 public:
  // dist (may be null): several ranks start from rank 0's weights and average their gradients every step.
  StepRunner(const StepOptions& options, int64_t num_classes, Distributed* dist = nullptr);
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  // Several ranks: rank 0's weights, buffers, optimizer state and EMA into every rank (after a restore on rank 0),
  // and the BN running statistics (the EMA's too) averaged across ranks (each rank saw only its shard) before
  // evaluating or saving.
  void broadcast_state();
  void average_buffers();
  // The name of the first parameter or floating buffer holding a NaN or an infinity, "" if none (one sync).
  std::string first_non_finite() const;
  // Several ranks stopping mid-epoch: every rank's BN running statistics, (world, n) float rank-major (they stay
  // per rank until the epoch ends; with train.ema the EMA's follow the model's in each row), for the checkpoint;
  // and back after a resume: rank 0 passes the checkpoint's (the other ranks an undefined tensor) and each rank
  // takes its own row (a row of the model's alone leaves the EMA's as restored). Undefined / nothing with one rank.
  at::Tensor gather_buffers();
  void scatter_buffers(const at::Tensor& all);

  // labels: (B,) int64 class indices, or (B, classes) float32 soft targets (smoothed already). Returns the loss, on
  // the device. With train.accumulate_steps N, each call is one micro-batch: the optimizer steps (at lr) on the
  // N-th, on the mean of the N micro-batches' gradients.
  at::Tensor train_step(const at::Tensor& images, const at::Tensor& labels, double lr);
  // Micro-batches taken since the last optimizer step (0 with train.accumulate_steps 1).
  int64_t pending_micro_steps() const { return micro_; }
  int64_t accumulate_steps() const { return accumulate_; }
  // An epoch's end inside an accumulation: the optimizer steps on the mean of the micro-batches taken (eagerly).
  void finish_accumulation(double lr);
  // Adds to sums (on device): [loss sum, top-1 correct, top-5 correct, samples]; ema: with the EMA's weights;
  // train.eval_flip: of the mean logits of the images and their horizontal flips.
  void eval_step(const at::Tensor& images, const at::Tensor& labels, at::Tensor& sums, bool ema = false);

  // A resolution schedule: the next side the run trains at. With train.cuda_graph, after the next step at another
  // side, a thread builds the cuDNN graph plans that side will need beside the training steps, and its capture
  // finds them (docs/resolution-schedule.md#the-cost-of-a-first-switch).
  void plan_ahead(int64_t next_side);

  bool graphed() const { return graphed_; }
  // train.cuda_graph: the batch shapes captured so far, one graph each (a resolution schedule's sides).
  int graphs() const { return static_cast<int>(graphs_.size()); }
  // What capturing them has cost so far: host seconds (warm-up and cuDNN's plan search at each new shape
  // included), the GPU memory the allocator reserved meanwhile, and the cuDNN graph plans built in them.
  struct CaptureCost {
    double seconds = 0;
    int64_t bytes = 0;
    int64_t plans = 0;
    CaptureCost operator-(const CaptureCost& o) const {
      return {seconds - o.seconds, bytes - o.bytes, plans - o.plans};
    }
  };
  CaptureCost capture_cost() const { return capture_cost_; }
  model::ResNet& model() { return model_; }
  Optimizer& optimizer() { return *optimizer_; }
  OptimizerKind optimizer_kind() const { return optimizer_kind_; }
  WeightEma* ema() const { return ema_.get(); }  // train.ema only; null otherwise
  model::ResNet& ema_model() { return ema_model_; }  // train.ema: the EMA's copy of the model, in eval mode
  LossScaler* loss_scaler() const { return scaler_.get(); }  // fp16 only; null otherwise
  c10::Device device() const { return device_; }

 private:
  // first: the first micro-batch of an optimizer step (the gradients start from zero); last: its last (several
  // ranks reduce them; fp16 unscales them).
  at::Tensor forward_backward(const at::Tensor& images, const at::Tensor& labels, bool first = true,
                              bool last = true);
  // After an optimizer step's last backward: gradients averaged across ranks, then unscaled (fp16).
  void reduce_and_unscale();
  // Gradient accumulation on CUDA graphs: every parameter's .grad a zeroed tensor allocated outside any graph, which
  // the micro-batches' backward passes add into in place.
  void allocate_grads();
  void zero_grads();
  // The optimizer (skipping the step when the loss scaler found an overflow), then the loss scale's update and
  // the EMA's; the learning rate from lr_tensor when defined (the graph), else lr.
  void optimizer_step(const at::Tensor& lr_tensor, double lr);
  at::Tensor graphed_step(const at::Tensor& images, const at::Tensor& labels, double lr, bool last);
  // BN running_mean and running_var in named_buffers() order, then the EMA's (with train.ema).
  std::vector<at::Tensor> running_statistics();

  model::ResNet model_{nullptr};
  std::unique_ptr<Optimizer> optimizer_;
  OptimizerKind optimizer_kind_;
  model::ResNet ema_model_{nullptr};  // train.ema
  std::unique_ptr<WeightEma> ema_;    // ema_model_'s tensors, moved toward model_'s after each step
  std::unique_ptr<LossScaler> scaler_;  // fp16
  Distributed* dist_ = nullptr;
  std::unique_ptr<GradSync> grad_sync_;  // several ranks only
  c10::Device device_;
  std::optional<c10::Stream> stream_;  // the compute stream (CUDA)
  std::optional<c10::Stream> capture_stream_;  // train.cuda_graph: where every capture runs (gpu::Graph::capture)
  std::optional<at::ScalarType> autocast_;
  double label_smoothing_;
  bool eval_flip_;
  int64_t batch_size_;
  int64_t accumulate_ = 1;  // train.accumulate_steps
  int64_t micro_ = 0;       // micro-batches taken since the last optimizer step
  // train.cuda_graph: the whole step (forward, backward, optimizer) captured once per batch shape and replayed,
  // reading the batch from static device buffers and the learning rate from one device scalar. Each graph keeps
  // its own memory, so that a switch back to a side seen before costs nothing (docs/resolution-schedule.md).
  // With train.accumulate_steps > 1 a second graph, `micro`, runs the micro-batches before the last (forward and
  // backward adding into .grad); `graph` then runs the last one, the optimizer step, and zeroes the gradients.
  struct Captured {
    std::unique_ptr<gpu::Graph> graph, micro;
    at::Tensor images, labels, loss, micro_loss;  // (B, C, S, S), (B,), () on the device
  };
  Captured& capture(const at::Tensor& images, const at::Tensor& labels);
  bool graphed_;
  std::map<std::vector<int64_t>, Captured> graphs_;  // by the batch's sizes and strides, and its labels' sizes
  at::Tensor lr_;  // () on the device
  CaptureCost capture_cost_;
  // plan_ahead: the side asked for (0: none), and the thread building its plans, joined before any capture.
  int64_t next_side_ = 0;
  std::thread ahead_;
  std::string ahead_line_;  // what it built, or why it stopped: logged when joined
  void start_ahead(int64_t side);
  void join_ahead();
};

}  // namespace pinfeed::engine
