#include "engine/optim/ema.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_copy.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sub.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace pinfeed::engine {

double ema_decay(const EmaOptions& o, int64_t update) {
  const int64_t n = std::max<int64_t>(0, update - 1);
  if (n <= 0) return 0.0;
  if (!o.warmup) return o.decay;
  const double warm = 1 - std::pow(1 + static_cast<double>(n) / o.warmup_gamma, -o.warmup_power);
  return std::max(std::min(warm, o.decay), o.min_decay);
}

WeightEma::WeightEma(std::vector<std::pair<std::string, at::Tensor>> ema,
                     std::vector<std::pair<std::string, at::Tensor>> model, const EmaOptions& options)
    : options_(options), named_(ema) {
  if (ema.size() != model.size() || ema.empty()) throw std::invalid_argument("the EMA and the model differ in tensors");
  for (size_t i = 0; i < ema.size(); ++i) {
    if (ema[i].first != model[i].first || !ema[i].second.sizes().equals(model[i].second.sizes())) {
      throw std::invalid_argument("the EMA's " + ema[i].first + " does not match the model's " + model[i].first);
    }
    const bool floating = ema[i].second.is_floating_point();
    (floating ? ema_float_ : ema_other_).push_back(ema[i].second);
    (floating ? model_float_ : model_other_).push_back(model[i].second);
  }
  decay_ = at::zeros({}, ema.front().second.options().dtype(at::kFloat));
  copy_model();
}

void WeightEma::advance() {
  ++updates_;
  last_decay_ = ema_decay(options_, updates_);
  decay_.fill_(last_decay_);
}

void WeightEma::apply() {
  at::NoGradGuard no_grad;
  // model + decay (ema - model), in place: decay 0 leaves exactly the model (timm's lerp does too).
  at::_foreach_sub_(ema_float_, model_float_);
  at::_foreach_mul_(ema_float_, decay_);
  at::_foreach_add_(ema_float_, model_float_);
  if (!ema_other_.empty()) at::_foreach_copy_(ema_other_, model_other_);
}

void WeightEma::copy_model() {
  at::NoGradGuard no_grad;
  at::_foreach_copy_(ema_float_, model_float_);
  if (!ema_other_.empty()) at::_foreach_copy_(ema_other_, model_other_);
  updates_ = 0;
}

std::map<std::string, at::Tensor> WeightEma::state() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : named_) out[name] = t;
  return out;
}

std::vector<at::Tensor> WeightEma::tensors() const {
  std::vector<at::Tensor> out = ema_float_;
  out.insert(out.end(), ema_other_.begin(), ema_other_.end());
  return out;
}

}  // namespace pinfeed::engine
