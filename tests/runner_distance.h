// How far apart two step runners' weights are, for tests that train the same network two ways.
#pragma once

#include <algorithm>
#include <cmath>

#include "engine/step/step_runner.h"

namespace pinfeed {

// |a - b| / |a| over all parameters together.
inline double relative_distance(engine::StepRunner& a, engine::StepRunner& b) {
  double diff = 0, norm = 0;
  const auto pa = a.model()->named_parameters(), pb = b.model()->named_parameters();
  for (const auto& item : pa) {
    const at::Tensor x = item.value().to(at::kDouble), y = pb[item.key()].to(at::kDouble);
    diff += (x - y).pow(2).sum().item<double>();
    norm += x.pow(2).sum().item<double>();
  }
  return std::sqrt(diff / norm);
}

// The largest |a - b| / |a| of one parameter tensor.
inline double largest_relative_difference(engine::StepRunner& a, engine::StepRunner& b) {
  double worst = 0;
  const auto pa = a.model()->named_parameters(), pb = b.model()->named_parameters();
  for (const auto& item : pa) {
    const at::Tensor x = item.value().to(at::kDouble), y = pb[item.key()].to(at::kDouble);
    worst = std::max(worst, (x - y).norm().item<double>() / (x.norm().item<double>() + 1e-12));
  }
  return worst;
}

}  // namespace pinfeed
