#include "engine/optim/lamb.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/_foreach_zero.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace pinfeed::engine {
namespace {

const char* const kExpAvg = "exp_avg/";
const char* const kExpAvgSq = "exp_avg_sq/";
const char* const kStep = "step";

}  // namespace

Lamb::Lamb(const std::vector<std::pair<std::string, at::Tensor>>& named, const std::vector<std::string>& no_decay,
           double weight_decay, LambOptions options)
    : Optimizer(tensors_of(named)), options_(options) {
  for (ParamGroup& g : decay_groups(named, no_decay, weight_decay)) groups_.push_back({std::move(g), {}, {}, {}});
}

void Lamb::create_state() {
  if (step_.defined()) return;
  for (auto& g : groups_) {
    for (const auto& p : g.params) {
      g.exp_avgs.push_back(at::zeros_like(p));
      g.exp_avg_sqs.push_back(at::zeros_like(p));
    }
  }
  const at::TensorOptions scalar = params_.at(0).options().dtype(at::kFloat);
  step_ = at::zeros({}, scalar);
}

void Lamb::step(double lr, const at::Tensor& found_inf) {
  if (!lr_.defined()) lr_ = at::zeros({}, params_.at(0).options().dtype(at::kFloat));
  lr_.fill_(lr);
  step_impl(lr_, found_inf);
}

void Lamb::step(const at::Tensor& lr, const at::Tensor& found_inf) { step_impl(lr, found_inf); }

void Lamb::step_impl(const at::Tensor& lr, const at::Tensor& found_inf) {
  at::NoGradGuard no_grad;
  create_state();
  // Everything below reads device scalars only. A skipped step (found_inf) leaves the moments to the fused kernel,
  // which skips them, and moves the weights by lr x 0.
  const at::Tensor neg_lr = found_inf.defined() ? lr * (found_inf - 1) : -lr;  // () float32
  std::vector<at::Tensor> all_grads;
  for (const auto& p : params_) {
    if (p.grad().defined()) all_grads.push_back(p.grad());
  }
  if (all_grads.empty()) return;
  step_.add_(1);  // the fused kernel's bias corrections read this step's number
  std::optional<at::Tensor> clip;  // the global gradient norm over max_grad_norm, at least 1 (timm's)
  if (options_.max_grad_norm > 0) {
    clip = (at::linalg_vector_norm(at::stack(at::_foreach_norm(all_grads))) / options_.max_grad_norm).clamp_min(1.0);
  }
  const std::optional<at::Tensor> skip = found_inf.defined() ? std::optional<at::Tensor>(found_inf) : std::nullopt;
  for (auto& g : groups_) {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, updates;
    if (g.updates.empty()) {
      for (const auto& p : g.params) g.updates.push_back(at::empty_like(p));
    }
    for (size_t i = 0; i < g.params.size(); ++i) {
      if (!g.params[i].grad().defined()) continue;
      params.push_back(g.params[i]);
      grads.push_back(g.params[i].grad());
      exp_avgs.push_back(g.exp_avgs[i]);
      exp_avg_sqs.push_back(g.exp_avg_sqs[i]);
      updates.push_back(g.updates[i]);
    }
    if (params.empty()) continue;
    // Adam's direction, bias-corrected, into `updates`: the fused kernel "steps" zeros with lr -1, so that
    // update = m_hat / (sqrt(v_hat) + eps); it divides the gradients by `clip` first (writing them back) and
    // leaves everything as it was on found_inf.
    at::_foreach_zero_(updates);
    const std::vector<at::Tensor> steps(params.size(), step_);
    at::_fused_adam_(updates, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, /*lr=*/-1.0,
                     options_.beta1, options_.beta2, /*weight_decay=*/0.0, options_.eps, /*amsgrad=*/false,
                     /*maximize=*/false, clip, skip);
    if (g.weight_decay != 0) {
      if (options_.decoupled_decay) {
        at::_foreach_mul_(params, 1 + neg_lr * g.weight_decay);  // w x (1 - lr wd), before the trust ratio's norm
      } else {
        at::_foreach_add_(updates, params, g.weight_decay);
      }
      const at::Tensor w = at::stack(at::_foreach_norm(params)), u = at::stack(at::_foreach_norm(updates));
      at::Tensor ratio = at::where(w > 0, at::where(u > 0, w / u, 1.0), 1.0);
      if (options_.trust_clip) ratio = ratio.clamp_max(1.0);
      at::_foreach_mul_(updates, (ratio * neg_lr).unbind(0));
    } else {
      at::_foreach_mul_(updates, neg_lr);
    }
    at::_foreach_add_(params, updates);
  }
  if (found_inf.defined()) step_.sub_(found_inf);  // a skipped step is not counted (torch's fused Adam alike)
}

std::map<std::string, at::Tensor> Lamb::state() const {
  std::map<std::string, at::Tensor> out;
  if (!step_.defined()) return out;
  for (const auto& g : groups_) {
    for (size_t i = 0; i < g.params.size(); ++i) {
      out[kExpAvg + g.names[i]] = g.exp_avgs[i];
      out[kExpAvgSq + g.names[i]] = g.exp_avg_sqs[i];
    }
  }
  out[kStep] = step_;
  return out;
}

std::map<std::string, at::Tensor> Lamb::zero_state() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& g : groups_) {
    for (size_t i = 0; i < g.params.size(); ++i) {
      out[kExpAvg + g.names[i]] = at::zeros_like(g.params[i]);
      out[kExpAvgSq + g.names[i]] = at::zeros_like(g.params[i]);
    }
  }
  out[kStep] = at::zeros({}, params_.at(0).options().dtype(at::kFloat));
  return out;
}

void Lamb::load_state(const std::map<std::string, at::Tensor>& state) {
  if (state.empty()) return;
  at::NoGradGuard no_grad;
  const auto find = [&](const std::string& name) -> const at::Tensor& {
    const auto it = state.find(name);
    if (it == state.end()) throw std::runtime_error("checkpoint lacks LAMB's " + name);
    return it->second;
  };
  for (auto& g : groups_) {
    g.exp_avgs.clear();
    g.exp_avg_sqs.clear();
    for (size_t i = 0; i < g.params.size(); ++i) {
      g.exp_avgs.push_back(at::empty_like(g.params[i]).copy_(find(kExpAvg + g.names[i])));
      g.exp_avg_sqs.push_back(at::empty_like(g.params[i]).copy_(find(kExpAvgSq + g.names[i])));
    }
  }
  const at::Tensor& step = find(kStep);
  if (step.numel() != 1) throw std::runtime_error("LAMB's step has " + std::to_string(step.numel()) + " elements, expected 1");
  step_ = at::zeros({}, params_.at(0).options().dtype(at::kFloat));
  step_.copy_(step.reshape({}));
}

void Lamb::reset_state() {
  if (!step_.defined()) return;
  at::NoGradGuard no_grad;
  for (auto& g : groups_) {
    for (auto& t : g.exp_avgs) t.zero_();
    for (auto& t : g.exp_avg_sqs) t.zero_();
  }
  step_.zero_();
}

}  // namespace pinfeed::engine
