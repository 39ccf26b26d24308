#include "engine/optim/sgd.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/_fused_sgd.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace pinfeed::engine {

Sgd::Sgd(const std::vector<std::pair<std::string, at::Tensor>>& named, const std::vector<std::string>& no_decay,
         SgdOptions options)
    : Optimizer(tensors_of(named)), options_(options) {
  for (ParamGroup& g : decay_groups(named, no_decay, options.weight_decay)) groups_.push_back({std::move(g), {}});
}

void Sgd::step(double lr, const at::Tensor& found_inf) { step_impl(lr, at::Tensor(), found_inf); }
void Sgd::step(const at::Tensor& lr, const at::Tensor& found_inf) { step_impl(0.0, lr, found_inf); }

void Sgd::step_impl(double lr, const at::Tensor& lr_tensor, const at::Tensor& found_inf) {
  const bool first = !started_;
  const bool momentum = options_.momentum != 0;  // plain SGD keeps no buffers (ATen's fused SGD takes none)
  at::NoGradGuard no_grad;
  for (auto& g : groups_) {
    if (g.params.empty()) continue;
    if (momentum && g.buffers.empty()) {
      for (auto& p : g.params) g.buffers.push_back(at::zeros_like(p));
    }
    std::vector<at::Tensor> params, grads, buffers;
    for (size_t i = 0; i < g.params.size(); ++i) {
      if (!g.params[i].grad().defined()) continue;
      params.push_back(g.params[i]);
      grads.push_back(g.params[i].grad());
      if (momentum) buffers.push_back(g.buffers[i]);
    }
    if (params.empty()) continue;
    // is_first_step: the buffer becomes the gradient itself (torch.optim.SGD's first step). A first step that
    // found_inf skips leaves the buffers at zero, and the next step's buffer = 0.9 x 0 + gradient is the same.
    // No grad_scale: the loss scaler has unscaled the gradients already.
    const std::optional<at::Tensor> skip = found_inf.defined() ? std::optional<at::Tensor>(found_inf) : std::nullopt;
    if (lr_tensor.defined()) {
      at::_fused_sgd_(params, grads, buffers, g.weight_decay, options_.momentum, lr_tensor, /*dampening=*/0.0,
                      options_.nesterov, /*maximize=*/false, /*is_first_step=*/first, /*grad_scale=*/{}, skip);
    } else {
      at::_fused_sgd_(params, grads, buffers, g.weight_decay, options_.momentum, lr, /*dampening=*/0.0,
                      options_.nesterov, /*maximize=*/false, /*is_first_step=*/first, /*grad_scale=*/{}, skip);
    }
  }
  started_ = true;
}

void Sgd::reset_state() {
  at::NoGradGuard no_grad;
  for (auto& g : groups_) {
    for (auto& b : g.buffers) b.zero_();
  }
}

std::map<std::string, at::Tensor> Sgd::state() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& g : groups_) {
    for (size_t i = 0; i < g.buffers.size(); ++i) out[g.names[i]] = g.buffers[i];
  }
  return out;
}

std::map<std::string, at::Tensor> Sgd::zero_state() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& g : groups_) {
    for (size_t i = 0; i < g.params.size(); ++i) out[g.names[i]] = at::zeros_like(g.params[i]);
  }
  return out;
}

void Sgd::load_state(const std::map<std::string, at::Tensor>& state) {
  if (state.empty()) return;
  for (auto& g : groups_) {
    g.buffers.clear();
    for (size_t i = 0; i < g.params.size(); ++i) {
      auto it = state.find(g.names[i]);
      if (it == state.end()) throw std::runtime_error("checkpoint lacks the momentum buffer of " + g.names[i]);
      g.buffers.push_back(at::empty_like(g.params[i]).copy_(it->second));  // keeps the parameter's memory format
    }
  }
  started_ = true;
}

}  // namespace pinfeed::engine
