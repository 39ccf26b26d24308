// Replays the steps that tests/check_optim_reference.py took with a Python reference (timm's Lamb, Lars and
// ModelEmaV3, torch's SGD) through pinfeed's own optimizer or weight EMA, and compares each step's tensors.
// Usage: optim_replay CASE.pt. Prints the largest difference of each step; exits 1 when one is past tolerance.
#include <ATen/TensorOperators.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/optim/ema.h"
#include "engine/optim/optimizer.h"
#include "engine/checkpoint/torch_file.h"

namespace pinfeed::app {
namespace {

using Named = std::vector<std::pair<std::string, at::Tensor>>;

double number(const c10::impl::GenericDict& d, const std::string& key) {
  const c10::IValue& v = d.at(key);
  return v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt());
}

std::map<std::string, at::Tensor> tensors(const c10::IValue& v) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : v.toGenericDict()) out[item.key().toStringRef()] = item.value().toTensor();
  return out;
}

// Largest |got - want| over (1e-6 + 1e-5 |want|), over every tensor: at most 1 passes. fp32 sums in another
// order (norms, fused kernels) differ by a few ulps.
double worst(const Named& got, const std::map<std::string, at::Tensor>& want, std::string& where) {
  double out = 0;
  for (const auto& [name, t] : got) {
    const at::Tensor w = want.at(name).to(at::kDouble), g = t.to(at::kDouble);
    const double r = ((g - w).abs() / (w.abs() * 1e-5 + 1e-6)).max().item<double>();
    if (!(r <= out)) out = r, where = name;  // a NaN counts as worst
  }
  return out;
}

engine::OptimizerOptions options_of(const std::string& kind, const c10::impl::GenericDict& o) {
  engine::OptimizerOptions opt;
  opt.sgd.weight_decay = number(o, "weight_decay");
  if (kind == "sgd" || kind == "lars") {
    opt.kind = kind == "sgd" ? engine::OptimizerKind::kSgd : engine::OptimizerKind::kLars;
    opt.sgd.momentum = number(o, "momentum");
    opt.sgd.nesterov = number(o, "nesterov") != 0;
    if (kind == "lars") opt.lars = {number(o, "eta"), number(o, "eps")};
  } else {
    opt.kind = engine::OptimizerKind::kLamb;
    opt.lamb = {number(o, "beta1"), number(o, "beta2"), number(o, "eps"), number(o, "max_grad_norm"),
                number(o, "trust_clip") != 0, number(o, "decoupled_decay") != 0};
  }
  return opt;
}

// The optimizer over fresh copies of the initial tensors, BN parameters and biases without weight decay (as
// train.decay_bn_and_bias = false and the reference's groups), the rate as a number or as a tensor.
bool replay_optimizer(const c10::impl::GenericDict& c, bool tensor_lr) {
  const std::string kind = c.at("kind").toStringRef();
  const auto initial = tensors(c.at("initial"));
  Named named;
  for (const auto& n : c.at("names").toListRef()) named.emplace_back(n.toStringRef(), initial.at(n.toStringRef()).clone());
  auto optimizer = engine::make_optimizer(named, engine::bn_and_bias_names(named), options_of(kind, c.at("options").toGenericDict()));
  bool ok = true;
  int k = 0;
  for (const auto& step_value : c.at("steps").toListRef()) {
    const auto step = step_value.toGenericDict();
    const auto grads = tensors(step.at("grads"));
    optimizer->zero_grad();
    for (auto& [name, p] : named) p.mutable_grad() = grads.at(name).clone();
    const at::Tensor found_inf = at::full({}, number(step, "found_inf"), at::kFloat);
    if (tensor_lr) {
      optimizer->step(at::full({}, number(step, "lr"), at::kFloat), found_inf);
    } else {
      optimizer->step(number(step, "lr"), found_inf);
    }
    std::string where;
    const double r = worst(named, tensors(step.at("expected")), where);
    std::printf("%s (lr %s) step %d%s: worst %.3g of tolerance at %s\n", kind.c_str(), tensor_lr ? "tensor" : "number",
                k, number(step, "found_inf") != 0 ? " (skipped)" : "", r, where.c_str());
    ok = ok && r <= 1;
    ++k;
  }
  return ok;
}

bool replay_ema(const c10::impl::GenericDict& c) {
  const auto initial = tensors(c.at("initial"));
  const auto o = c.at("options").toGenericDict();
  engine::EmaOptions options;
  options.enabled = true;
  options.decay = number(o, "decay");
  options.warmup = number(o, "warmup") != 0;
  options.warmup_gamma = number(o, "warmup_gamma");
  options.warmup_power = number(o, "warmup_power");
  options.min_decay = number(o, "min_decay");
  Named ema, model;
  for (const auto& n : c.at("names").toListRef()) {
    ema.emplace_back(n.toStringRef(), at::zeros_like(initial.at(n.toStringRef())));
    model.emplace_back(n.toStringRef(), initial.at(n.toStringRef()).clone());
  }
  engine::WeightEma weights(ema, model, options);  // starts as a copy of the model, as ModelEmaV3's deepcopy
  bool ok = true;
  int k = 0;
  for (const auto& step_value : c.at("steps").toListRef()) {
    const auto step = step_value.toGenericDict();
    const auto now = tensors(step.at("model"));
    for (auto& [name, t] : model) t.copy_(now.at(name));
    weights.advance();
    weights.apply();
    std::string where;
    const double r = worst(ema, tensors(step.at("expected")), where);
    std::printf("ema step %d (decay %.6g): worst %.3g of tolerance at %s\n", k, weights.last_decay(), r, where.c_str());
    ok = ok && r <= 1;
    ++k;
  }
  return ok;
}

}  // namespace
}  // namespace pinfeed::app

int main(int argc, char** argv) {
  using namespace pinfeed::app;
  if (argc != 2) {
    std::fprintf(stderr, "usage: optim_replay CASE.pt\n");
    return 2;
  }
  try {
    at::NoGradGuard no_grad;
    const c10::IValue v = pinfeed::engine::parse_torch_file(pinfeed::engine::read_torch_file(argv[1]), argv[1]);
    const auto c = v.toGenericDict();
    if (c.at("kind").toStringRef() == "ema") return replay_ema(c) ? 0 : 1;
    const bool a = replay_optimizer(c, /*tensor_lr=*/false), b = replay_optimizer(c, /*tensor_lr=*/true);
    return a && b ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optim_replay: %s\n", e.what());
    return 2;
  }
}
