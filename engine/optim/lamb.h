// LAMB as timm.optim.Lamb defines it (You et al. 2019, "Large Batch Optimization for Deep Learning"; the NVLAMB
// variant of NVIDIA's apex FusedLAMB): the gradients clipped to a global norm, Adam's bias-corrected direction
// m / (sqrt(v) + eps), weight decay added to it, and each decayed tensor's step scaled by its trust ratio
// ||w|| / ||update|| (1 where either norm is 0; at most 1 with trust_clip). Parameters without weight decay
// take the Adam step unscaled, as timm's no-decay group does. The moments come from ATen's fused Adam kernel,
// which also applies the clipping and skips the step on found_inf; the step count lives on the device.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "engine/optim/optimizer.h"

namespace pinfeed::engine {

class Lamb : public Optimizer {
 public:
  Lamb(const std::vector<std::pair<std::string, at::Tensor>>& named, const std::vector<std::string>& no_decay,
       double weight_decay, LambOptions options);

  void step(double lr, const at::Tensor& found_inf = {}) override;
  void step(const at::Tensor& lr, const at::Tensor& found_inf = {}) override;

  // "exp_avg/<name>", "exp_avg_sq/<name>" for every parameter, and "step" (() float32, steps taken; a skipped
  // one does not count); empty before the first step.
  std::map<std::string, at::Tensor> state() const override;
  std::map<std::string, at::Tensor> zero_state() const override;
  void load_state(const std::map<std::string, at::Tensor>& state) override;
  void reset_state() override;

 private:
  struct Group : ParamGroup {
    std::vector<at::Tensor> exp_avgs, exp_avg_sqs;
    std::vector<at::Tensor> updates;  // the step's direction, per parameter: working memory
  };
  void create_state();
  void step_impl(const at::Tensor& lr, const at::Tensor& found_inf);

  std::vector<Group> groups_;
  LambOptions options_;
  at::Tensor step_;  // () float32 on the parameters' device; undefined before the first step
  at::Tensor lr_;    // () float32: step(double)'s rate, on the device as a graph's would be
};

}  // namespace pinfeed::engine
