#include "engine/optim/loss_scaler.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <ATen/ops/full.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/reciprocal.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <stdexcept>

namespace pinfeed::engine {

LossScaler::LossScaler(c10::Device device, const LossScalerOptions& options) : options_(options) {
  const auto on = at::TensorOptions().device(device);
  scale_ = at::full({}, options.init_scale, on.dtype(at::kFloat));
  growth_tracker_ = at::zeros({}, on.dtype(at::kInt));
  skipped_ = at::zeros({}, on.dtype(at::kDouble));
  found_inf_ = at::zeros({}, on.dtype(at::kFloat));
  inv_scale_ = at::ones_like(scale_);
}

at::Tensor LossScaler::scale(const at::Tensor& loss) const { return at::mul(loss.to(at::kFloat), scale_); }

void LossScaler::unscale(const std::vector<at::Tensor>& grads) {
  at::NoGradGuard no_grad;
  found_inf_.zero_();
  at::reciprocal_out(inv_scale_, scale_);
  // The op takes gradients of one device and dtype per call; ResNet-50's are all float32 on one device.
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale_);
}

void LossScaler::update() {
  at::NoGradGuard no_grad;
  skipped_.add_(found_inf_);
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor, options_.backoff_factor,
                         options_.growth_interval);
}

double LossScaler::current_scale() const { return scale_.item<double>(); }
int64_t LossScaler::skipped_steps() const { return static_cast<int64_t>(skipped_.item<double>()); }

std::map<std::string, at::Tensor> LossScaler::state() const {
  return {{"scale", scale_}, {"growth_tracker", growth_tracker_}, {"skipped_steps", skipped_}};
}

void LossScaler::load_state(const std::map<std::string, at::Tensor>& state) {
  at::NoGradGuard no_grad;
  for (auto& [name, mine] : this->state()) {
    const auto it = state.find(name);
    if (it == state.end()) throw std::runtime_error("the loss scaler's state lacks " + name);
    if (it->second.numel() != 1) {
      throw std::runtime_error("the loss scaler's " + name + " has " + std::to_string(it->second.numel()) +
                               " elements, expected 1");
    }
    at::Tensor target = mine;  // state() hands out the tensors themselves
    target.copy_(it->second.reshape({}));
  }
  if (!(current_scale() > 0) || !std::isfinite(current_scale())) {
    throw std::runtime_error("the loss scaler's scale is " + std::to_string(current_scale()) +
                             ", expected a finite positive number");
  }
}

}  // namespace pinfeed::engine
