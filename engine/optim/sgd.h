// SGD with momentum (optionally Nesterov) and decoupled parameter groups (weight decay on or off), stepping
// every tensor of a group with one fused kernel (at::_fused_sgd_, as torch.optim.SGD(fused=True)) instead of
// a handful of small kernels per parameter.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "engine/optim/optimizer.h"

namespace pinfeed::engine {

class Sgd : public Optimizer {
 public:
  // named: (name, parameter). Names listed in no_decay get weight decay 0.
  Sgd(const std::vector<std::pair<std::string, at::Tensor>>& named, const std::vector<std::string>& no_decay,
      SgdOptions options);

  void step(double lr, const at::Tensor& found_inf = {}) override;
  void step(const at::Tensor& lr, const at::Tensor& found_inf = {}) override;

  // Momentum buffers by parameter name; empty before the first step (and always with momentum 0).
  std::map<std::string, at::Tensor> state() const override;
  std::map<std::string, at::Tensor> zero_state() const override;
  void load_state(const std::map<std::string, at::Tensor>& state) override;
  // Buffers to 0: the next step then sets them to the gradient, as a first step does.
  void reset_state() override;

 private:
  struct Group : ParamGroup {
    std::vector<at::Tensor> buffers;
  };
  void step_impl(double lr, const at::Tensor& lr_tensor, const at::Tensor& found_inf);

  std::vector<Group> groups_;
  SgdOptions options_;
  bool started_ = false;
};

}  // namespace pinfeed::engine
