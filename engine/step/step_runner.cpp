#include "engine/step/step_runner.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/StreamGuard.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/step/autocast.h"

namespace pinfeed::engine {
namespace {

std::vector<std::pair<std::string, at::Tensor>> named_parameters(const model::ResNet& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : m->named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

// Parameters, then buffers: what a state dict holds, in the order the EMA pairs them.
std::vector<std::pair<std::string, at::Tensor>> named_state(const model::ResNet& m) {
  std::vector<std::pair<std::string, at::Tensor>> out = named_parameters(m);
  for (const auto& item : m->named_buffers()) out.emplace_back(item.key(), item.value());
  return out;
}

model::ResNet build_model(const StepOptions& o, int64_t num_classes) {
  model::ResNetOptions net = o.net;
  net.num_classes = num_classes;
  model::ResNet m = model::resnet(net);
  m->to(o.device);
  if (o.channels_last) {
    at::NoGradGuard no_grad;
    for (auto& p : m->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(c10::MemoryFormat::ChannelsLast));
    }
  }
  return m;
}

}  // namespace

std::optional<c10::ScalarType> autocast_dtype(Precision precision) {
  if (precision == Precision::kBf16) return at::kBFloat16;
  if (precision == Precision::kFp16) return at::kHalf;
  return std::nullopt;
}

StepRunner::StepRunner(const StepOptions& o, int64_t num_classes, Distributed* dist)
    : dist_(dist && dist->grouped() ? dist : nullptr), device_(o.device), stream_(o.compute_stream),
      autocast_(autocast_dtype(o.precision)), label_smoothing_(o.label_smoothing), eval_flip_(o.eval_flip),
      batch_size_(o.batch_size), accumulate_(std::max<int64_t>(1, o.accumulate_steps)),
      graphed_(o.device.is_cuda() && o.cuda_graph) {
  at::manual_seed(o.seed);
  model_ = build_model(o, num_classes);
  if (o.ema.enabled) {
    // Its initial weights are overwritten by the model's: drawing them must not move the generator the run uses.
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    const at::Tensor rng = generator.get_state();
    ema_model_ = build_model(o, num_classes);
    generator.set_state(rng);
    ema_model_->eval();
    ema_ = std::make_unique<WeightEma>(named_state(ema_model_), named_state(model_), o.ema);
  }
  const auto named = named_parameters(model_);
  optimizer_kind_ = o.optimizer.kind;
  optimizer_ = make_optimizer(named, o.decay_bn_and_bias ? std::vector<std::string>{} : bn_and_bias_names(named),
                              o.optimizer);
  if (o.precision == Precision::kFp16) scaler_ = std::make_unique<LossScaler>(device_, o.loss_scaler);
  if (graphed_) capture_stream_ = gpu::new_stream(device_);
  if (dist_) {
    broadcast_state();
    // Its gradient accumulators live across steps and run on the stream they are made on: the captures' (gpu.h).
    std::optional<c10::StreamGuard> on_capture_stream;
    if (capture_stream_) {
      on_capture_stream.emplace(*capture_stream_);
      // An eager step (an epoch's short last batch) then feeds them from the compute stream: a wait, meant.
      at::globalContext().setWarnOnAccumulateGradStreamMismatch(false);
    }
    grad_sync_ = std::make_unique<GradSync>(model_->parameters(), dist_->backend(), o.bucket_bytes(), o.overlap);
  }
}

void StepRunner::broadcast_state() {
  if (!dist_) return;
  std::vector<at::Tensor> state = model_->parameters();
  for (const auto& b : model_->buffers()) state.push_back(b);
  for (const auto& [name, momentum] : optimizer_->state()) state.push_back(momentum);
  // Momentum exists on rank 0 after a restore but not yet elsewhere: every rank must send the same list.
  const bool with_momentum = dist_->any(!optimizer_->state().empty());
  if (with_momentum && optimizer_->state().empty()) {
    optimizer_->load_state(optimizer_->zero_state());
    for (const auto& [name, momentum] : optimizer_->state()) state.push_back(momentum);
  }
  if (scaler_) {  // after the momentum: every rank's list must line up
    for (const auto& [name, t] : scaler_->state()) state.push_back(t);
  }
  at::Tensor ema_updates;  // the count the EMA's decay follows: rank 0's restored one
  if (ema_) {
    for (const auto& t : ema_->tensors()) state.push_back(t);
    ema_updates = at::full({}, static_cast<double>(ema_->updates()), at::TensorOptions().device(device_).dtype(at::kDouble));
    state.push_back(ema_updates);
  }
  dist_->broadcast(state);
  if (ema_) ema_->set_updates(static_cast<int64_t>(ema_updates.item<double>()));
}

std::vector<at::Tensor> StepRunner::running_statistics() {
  std::vector<at::Tensor> running;  // running_mean and running_var; num_batches_tracked is equal on every rank
  for (const model::ResNet* m : {&model_, &ema_model_}) {
    if (m->is_empty()) continue;
    for (const auto& b : (*m)->buffers()) {
      if (b.is_floating_point()) running.push_back(b);
    }
  }
  return running;
}

std::string StepRunner::first_non_finite() const {
  at::NoGradGuard no_grad;
  std::vector<std::string> names;
  std::vector<at::Tensor> finite;  // () bool each, on the device: one copy to the host for all of them
  for (const auto& items : {model_->named_parameters(), model_->named_buffers()}) {
    for (const auto& item : items) {
      if (!at::isFloatingType(item.value().scalar_type())) continue;
      names.push_back(item.key());
      finite.push_back(at::isfinite(item.value()).all());
    }
  }
  if (finite.empty()) return "";
  const at::Tensor all = at::stack(finite).cpu();
  const bool* ok = all.data_ptr<bool>();
  for (size_t i = 0; i < names.size(); ++i) {
    if (!ok[i]) return names[i];
  }
  return "";
}

void StepRunner::average_buffers() {
  if (dist_) dist_->all_reduce_mean(running_statistics());
}

at::Tensor StepRunner::gather_buffers() {
  if (!dist_) return {};
  std::vector<at::Tensor> flat;
  for (const auto& b : running_statistics()) flat.push_back(b.detach().to(at::kFloat).reshape(-1));
  return dist_->all_gather_rows(at::cat(flat));
}

void StepRunner::scatter_buffers(const at::Tensor& all) {
  if (!dist_ || !dist_->any(all.defined())) return;
  std::vector<at::Tensor> running = running_statistics();
  int64_t n = 0;
  for (const auto& b : running) n += b.numel();
  // Rows written without train.ema hold the model's alone: the EMA keeps the mean it was restored with. Rows
  // written with it, read without it, hold the EMA's after the model's: left out.
  int64_t width = n;
  const auto rows_of = [&](int64_t w) { return all.defined() && all.dim() == 2 && all.size(1) == w; };
  if (dist_->any(ema_ && rows_of(n / 2))) {
    running.resize(running.size() / 2);
    n /= 2;
    width = n;
  } else if (dist_->any(!ema_ && rows_of(2 * n))) {
    width = 2 * n;
  }
  at::Tensor rows = at::empty({dist_->world(), width}, at::TensorOptions().device(device_).dtype(at::kFloat));
  if (dist_->is_main()) {
    if (all.dim() != 2 || all.size(0) != dist_->world() || all.size(1) != width) {
      throw std::runtime_error("checkpoint's rank_buffers have shape " + c10::str(all.sizes()) + ", expected [" +
                               std::to_string(dist_->world()) + ", " + std::to_string(width) + "]");
    }
    rows.copy_(all);
  }
  dist_->broadcast({rows});
  at::NoGradGuard no_grad;
  const at::Tensor mine = rows[dist_->rank()];
  int64_t offset = 0;
  for (auto& b : running) {
    b.copy_(mine.narrow(0, offset, b.numel()).view(b.sizes()));
    offset += b.numel();
  }
}

void StepRunner::allocate_grads() {
  at::NoGradGuard no_grad;
  for (auto& p : model_->parameters()) {
    if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p, p.suggest_memory_format());
  }
}

void StepRunner::zero_grads() {
  at::NoGradGuard no_grad;
  for (auto& p : model_->parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

at::Tensor StepRunner::forward_backward(const at::Tensor& images, const at::Tensor& labels, bool first, bool last) {
  // One step: .grad reset, backward allocates it. Accumulating: zeroed in place on the first micro-batch (the
  // graphs' .grad tensors stay where they were captured); later ones add into it.
  if (accumulate_ == 1) optimizer_->zero_grad();
  else if (first) zero_grads();
  if (grad_sync_) grad_sync_->set_reduce(last);
  at::Tensor loss;
  {
    AutocastScope autocast(autocast_, /*cache=*/!graphed_);
    const at::Tensor logits = model_->forward(images);
    // Soft targets (Mixup/CutMix, pipeline/augment/mixup.h) carry their label smoothing already (timm's
    // mixup_target with SoftTargetCrossEntropy): the loss adds none.
    const double smoothing = labels.dim() == 2 ? 0.0 : label_smoothing_;
    loss = at::cross_entropy_loss(logits, labels, {}, at::Reduction::Mean, -100, smoothing);
  }
  at::Tensor objective = scaler_ ? scaler_->scale(loss) : loss;
  if (accumulate_ > 1) objective = objective / static_cast<double>(accumulate_);  // the mean over the micro-batches
  objective.backward();
  if (last) reduce_and_unscale();
  return loss.detach();
}

void StepRunner::reduce_and_unscale() {
  if (grad_sync_) grad_sync_->finish_step();  // gradients averaged across ranks before the optimizer reads them
  if (scaler_) {  // after the average: every rank checks the same gradients
    std::vector<at::Tensor> grads;
    for (const auto& p : model_->parameters()) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
    scaler_->unscale(grads);
  }
}

void StepRunner::optimizer_step(const at::Tensor& lr_tensor, double lr) {
  const at::Tensor found_inf = scaler_ ? scaler_->found_inf() : at::Tensor();
  if (lr_tensor.defined()) {
    optimizer_->step(lr_tensor, found_inf);
  } else {
    optimizer_->step(lr, found_inf);
  }
  if (scaler_) scaler_->update();
  // After every step, one the loss scaler skipped included (timm's train.py updates it after each update too).
  if (ema_) ema_->apply();
}

at::Tensor StepRunner::train_step(const at::Tensor& images, const at::Tensor& labels, double lr) {
  // A final partial batch runs eagerly: captured once, it would keep a graph's memory for one step an epoch.
  const bool full = batch_size_ == 0 || images.size(0) == batch_size_;
  const bool first = micro_ == 0, last = micro_ + 1 == accumulate_;
  micro_ = last ? 0 : micro_ + 1;
  if (last && ema_) ema_->advance();  // this step's decay, on the device before the step (or its replay) reads it
  if (!graphed_ || !full) {
    at::Tensor loss = forward_backward(images, labels, first, last);
    if (last) optimizer_step({}, lr);
    if (last && graphed_ && accumulate_ > 1) zero_grads();  // the micro graph adds into them next
    return loss;
  }
  return graphed_step(images, labels, lr, last);
}

void StepRunner::finish_accumulation(double lr) {
  if (micro_ == 0) return;
  at::NoGradGuard no_grad;
  // Each micro-batch's loss was divided by accumulate_: the mean over the micro_ taken instead.
  const double rescale = static_cast<double>(accumulate_) / static_cast<double>(micro_);
  for (auto& p : model_->parameters()) {
    if (p.grad().defined()) p.mutable_grad().mul_(rescale);
  }
  micro_ = 0;
  reduce_and_unscale();  // no bucket was launched yet: all are reduced now
  if (ema_) ema_->advance();
  optimizer_step({}, lr);
  if (graphed_) zero_grads();  // the micro graph adds into them next
}

StepRunner::~StepRunner() { join_ahead(); }

void StepRunner::eval_step(const at::Tensor& images, const at::Tensor& labels, at::Tensor& sums, bool ema) {
  at::NoGradGuard no_grad;
  AutocastScope autocast(autocast_);
  if (ema && !ema_) throw std::logic_error("eval_step: train.ema is off");
  model::ResNet& net = ema ? ema_model_ : model_;
  at::Tensor logits = net->forward(images).to(at::kFloat);
  // FFCV's lr_tta, its sum halved: the same ranking, and a loss on the scale of one pass's.
  if (eval_flip_) logits = (logits + net->forward(images.flip(3)).to(at::kFloat)) / 2;
  const at::Tensor loss = at::cross_entropy_loss(logits, labels, {}, at::Reduction::Sum);
  const int64_t k = std::min<int64_t>(5, logits.size(1));
  const at::Tensor hits = std::get<1>(logits.topk(k, 1)).eq(labels.unsqueeze(1));
  sums[0] += loss;
  sums[1] += hits.narrow(1, 0, 1).sum();
  sums[2] += hits.sum();
  sums[3] += labels.size(0);
}

}  // namespace pinfeed::engine
