#include "engine/optim/lars.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>

#include <algorithm>

namespace pinfeed::engine {
namespace {

// SGD's no-decay list: the given one, and every adapted parameter (its decay goes into the gradient first).
std::vector<std::string> sgd_no_decay(const std::vector<std::pair<std::string, at::Tensor>>& named,
                                      std::vector<std::string> no_decay) {
  const std::vector<std::string> plain = bn_and_bias_names(named);
  for (const auto& [name, p] : named) {
    if (!listed(plain, name) && !listed(no_decay, name)) no_decay.push_back(name);
  }
  return no_decay;
}

}  // namespace

Lars::Lars(const std::vector<std::pair<std::string, at::Tensor>>& named, const std::vector<std::string>& no_decay,
           SgdOptions sgd, LarsOptions lars)
    : Optimizer(tensors_of(named)), options_(lars), sgd_(named, sgd_no_decay(named, no_decay), sgd) {
  for (ParamGroup& g : decay_groups(named, no_decay, sgd.weight_decay, /*skip=*/bn_and_bias_names(named))) {
    if (!g.params.empty()) adapted_.push_back(std::move(g));
  }
}

void Lars::adapt() {
  at::NoGradGuard no_grad;
  for (const ParamGroup& g : adapted_) {
    std::vector<at::Tensor> params, grads;
    for (const auto& p : g.params) {
      if (!p.grad().defined()) continue;
      params.push_back(p);
      grads.push_back(p.grad());
    }
    if (params.empty()) continue;
    // On the device, no host read: a step the loss scaler skips computes garbage ratios that nothing keeps.
    const at::Tensor w = at::stack(at::_foreach_norm(params)), d = at::stack(at::_foreach_norm(grads));
    const at::Tensor ratio = at::where((w > 0).logical_and(d > 0), options_.eta * w / (d + g.weight_decay * w + options_.eps), 1.0);
    if (g.weight_decay != 0) at::_foreach_add_(grads, params, g.weight_decay);
    at::_foreach_mul_(grads, ratio.unbind(0));  // the gradients are the step's own: freed by the next zero_grad
  }
}

void Lars::step(double lr, const at::Tensor& found_inf) {
  adapt();
  sgd_.step(lr, found_inf);
}

void Lars::step(const at::Tensor& lr, const at::Tensor& found_inf) {
  adapt();
  sgd_.step(lr, found_inf);
}

}  // namespace pinfeed::engine
