// StepRunner's CUDA graphs (train.cuda_graph): the whole step captured once per batch shape and replayed, and a
// resolution schedule's next side's cuDNN plans built ahead, beside the steps.
#include "engine/step/step_runner.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>

#include <chrono>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/log.h"
#include "model/graph_plans.h"

namespace pinfeed::engine {

namespace {
// The images' sizes and strides, and the labels' sizes: class indices or soft targets (a bench runs both).
std::vector<int64_t> shape_key(const at::Tensor& images, const at::Tensor& labels) {
  std::vector<int64_t> key(images.sizes().begin(), images.sizes().end());
  key.insert(key.end(), images.strides().begin(), images.strides().end());
  key.push_back(-1);
  key.insert(key.end(), labels.sizes().begin(), labels.sizes().end());
  return key;
}
}  // namespace

void StepRunner::plan_ahead(int64_t next_side) {
  if (graphed_) next_side_ = next_side;
}

void StepRunner::start_ahead(int64_t side) {
  const int64_t to = next_side_;
  next_side_ = 0;
  if (to == side || ahead_.joinable()) return;
  for (const auto& [key, c] : graphs_) {
    if (key[2] == to) return;  // (N, C, H, W, ...): captured already
  }
  const c10::Device device = device_;
  ahead_ = std::thread([this, side, to, device] {
    try {
      const model::PlanCost built = model::build_graph_plans_ahead(side, to, device);
      std::ostringstream line;
      line << std::fixed << std::setprecision(2) << "cuDNN graph plans for " << to << " px built ahead, beside the "
           << side << " px steps: " << built.graphs << " in " << built.seconds << " s";
      ahead_line_ = line.str();
    } catch (const std::exception& e) {
      ahead_line_ = std::string("cuDNN graph plans for ") + std::to_string(to) +
                    " px not built ahead (its first step builds them): " + e.what();
    }
  });
}

void StepRunner::join_ahead() {
  if (!ahead_.joinable()) return;
  ahead_.join();
  log::info(ahead_line_);
}

StepRunner::Captured& StepRunner::capture(const at::Tensor& images, const at::Tensor& labels) {
  join_ahead();  // its plans are this capture's; and no graph is captured while it runs
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t reserved0 = gpu::reserved_bytes(device_);
  Captured& c = graphs_[shape_key(images, labels)];
  c.images = at::empty_like(images);
  c.labels = at::empty_like(labels);
  c.images.copy_(images);
  c.labels.copy_(labels);
  if (!lr_.defined()) lr_ = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kFloat));
  lr_.zero_();  // the warm-up runs the body for real: with the last replay's rate it would move the weights
  c.graph = std::make_unique<gpu::Graph>();
  // Warm-up and capture run the step for real on this batch with lr 0: the weights stay, but the optimizer's
  // state, BN's running statistics, the loss scale and the EMA would move. What they held before (a resumed run's
  // restored state, earlier steps at another side, or no optimizer state yet) is put back afterwards, in place:
  // the graphs hold these very tensors.
  std::vector<at::Tensor> buffers = model_->buffers(), saved_buffers;
  if (scaler_) {
    for (const auto& [name, t] : scaler_->state()) buffers.push_back(t);
  }
  if (ema_) {
    for (const auto& t : ema_->tensors()) buffers.push_back(t);
  }
  if (accumulate_ > 1) {  // the micro-batches' sum so far (a new side may first come mid-accumulation)
    allocate_grads();
    for (const auto& p : model_->parameters()) buffers.push_back(p.grad());
  }
  for (const auto& b : buffers) saved_buffers.push_back(b.clone());
  std::map<std::string, at::Tensor> saved_state;
  for (const auto& [name, t] : optimizer_->state()) saved_state[name] = t.clone();
  // Each call's time on the CPU: the first pays for every plan the new shape needs (where a switch's time goes).
  std::vector<double> call_s;
  const model::PlanCost plans0 = model::plan_cost();
  if (accumulate_ > 1) {
    c.micro = std::make_unique<gpu::Graph>();
    c.micro->capture(*stream_, *capture_stream_, 3, [this, &c] { c.micro_loss = forward_backward(c.images, c.labels, false, false); });
  }
  c.graph->capture(*stream_, *capture_stream_, 3, [this, &c, &call_s] {
    const auto call0 = std::chrono::steady_clock::now();
    c.loss = forward_backward(c.images, c.labels, accumulate_ == 1, true);
    optimizer_step(lr_, 0.0);
    if (accumulate_ > 1) zero_grads();  // the next optimizer step's micro-batches add into zeros
    call_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - call0).count());
  }, c.micro.get());
  const model::PlanCost plans = model::plan_cost() - plans0;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(saved_buffers[i]);
  if (saved_state.empty()) {
    optimizer_->reset_state();  // the first replay then steps as a first step does (momentum = gradient)
  } else {
    for (auto& [name, t] : optimizer_->state()) t.copy_(saved_state.at(name));
  }
  stream_->synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  capture_cost_.seconds += seconds;
  capture_cost_.bytes += gpu::reserved_bytes(device_) - reserved0;
  capture_cost_.plans += plans.graphs;
  std::ostringstream line;
  line << std::fixed << std::setprecision(2) << "CUDA graph for images " << images.sizes() << ": " << seconds
       << " s; warm-up steps";
  for (size_t i = 0; i + 1 < call_s.size(); ++i) line << (i ? " / " : " ") << call_s[i];
  line << " s (cuDNN graph plans: " << plans.graphs << " built in " << plans.seconds << " s), capture "
       << (call_s.empty() ? 0.0 : call_s.back()) << " s";
  log::info(line.str());
  return c;
}

at::Tensor StepRunner::graphed_step(const at::Tensor& images, const at::Tensor& labels, double lr, bool last) {
  auto it = graphs_.find(shape_key(images, labels));
  Captured& c = it != graphs_.end() ? it->second : capture(images, labels);
  c.images.copy_(images);
  c.labels.copy_(labels);
  if (!last) {
    c.micro->replay(*stream_);
    return c.micro_loss;
  }
  lr_.fill_(lr);
  c.graph->replay(*stream_);
  if (next_side_ > 0) start_ahead(images.size(2));
  return c.loss;
}

}  // namespace pinfeed::engine
