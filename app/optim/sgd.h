// SGD with momentum (optionally Nesterov) and decoupled parameter groups (weight decay on or off), stepping
// every tensor of a group with one fused kernel (at::_fused_sgd_, as torch.optim.SGD(fused=True)) instead of
// a handful of small kernels per parameter.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

namespace pinfeed::app {

struct SgdOptions {
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 1e-4;
};

class Sgd {
 public:
  // named: (name, parameter). Names listed in no_decay get weight decay 0.
  Sgd(const std::vector<std::pair<std::string, at::Tensor>>& named, const std::vector<std::string>& no_decay,
      SgdOptions options);

  void zero_grad();  // sets gradients to None (frees them), as torch's default
  // found_inf (optional, a one-element device tensor, LossScaler::found_inf()): nonzero skips the whole step,
  // momentum included, without the host reading it.
  void step(double lr, const at::Tensor& found_inf = {});
  // The learning rate read from a one-element device tensor: what a captured CUDA graph replays with.
  void step(const at::Tensor& lr, const at::Tensor& found_inf = {});
  void zero_momentum();  // buffers to 0: the next step then sets them to the gradient, as a first step does

  // Momentum buffers by parameter name, for checkpoints; empty before the first step.
  std::map<std::string, at::Tensor> state() const;
  std::map<std::string, at::Tensor> zero_state() const;  // state()'s names and shapes, zeros
  void load_state(const std::map<std::string, at::Tensor>& state);

 private:
  struct Group {
    double weight_decay = 0;
    std::vector<std::string> names;
    std::vector<at::Tensor> params, buffers;
  };
  void step_impl(double lr, const at::Tensor& lr_tensor, const at::Tensor& found_inf);

  std::vector<Group> groups_;
  SgdOptions options_;
  bool started_ = false;
};

}  // namespace pinfeed::app
