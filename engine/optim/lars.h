// LARS as MLPerf's ResNet-50 trains with it (You et al. 2017, "Large Batch Training of Convolutional Networks";
// NVIDIA's MLPerf submissions, SGDwFASTLARS): each conv and fc weight's gradient, its weight decay added, is
// scaled by the layer's trust ratio eta ||w|| / (||g|| + wd ||w|| + eps) (1 where either norm is 0), then the
// step is SGD's momentum step with the global learning rate outside the buffer. BN parameters and biases are
// never adapted; train.decay_bn_and_bias = false (MLPerf's) keeps them from weight decay too. The same update
// as timm.optim.Lars over two parameter groups, the adapted weights with weight decay and the rest without.
// (NVIDIA's code also decays fc's bias; MLPerf's reference does not, nor does this.)
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "engine/optim/optimizer.h"
#include "engine/optim/sgd.h"

namespace pinfeed::engine {

class Lars : public Optimizer {
 public:
  Lars(const std::vector<std::pair<std::string, at::Tensor>>& named, const std::vector<std::string>& no_decay,
       SgdOptions sgd, LarsOptions lars);

  void step(double lr, const at::Tensor& found_inf = {}) override;
  void step(const at::Tensor& lr, const at::Tensor& found_inf = {}) override;

  // SGD's: the momentum buffers by parameter name.
  std::map<std::string, at::Tensor> state() const override { return sgd_.state(); }
  std::map<std::string, at::Tensor> zero_state() const override { return sgd_.zero_state(); }
  void load_state(const std::map<std::string, at::Tensor>& state) override { sgd_.load_state(state); }
  void reset_state() override { sgd_.reset_state(); }

 private:
  // The adapted parameters of one weight decay, their gradients scaled in place by adapt().
  void adapt();

  std::vector<ParamGroup> adapted_;  // the conv and fc weights, with and without decay
  LarsOptions options_;
  // The momentum step of every parameter; the adapted ones' weight decay is already in their gradients.
  Sgd sgd_;
};

}  // namespace pinfeed::engine
