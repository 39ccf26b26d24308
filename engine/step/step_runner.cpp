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
#include <chrono>
#include <iomanip>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/step/autocast.h"
#include "common/log.h"
#include "model/graph_plans.h"

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
