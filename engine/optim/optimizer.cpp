#include "engine/optim/optimizer.h"

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "engine/optim/lamb.h"
#include "engine/optim/lars.h"
#include "engine/optim/sgd.h"

namespace pinfeed::engine {
namespace {

using Named = std::vector<std::pair<std::string, at::Tensor>>;

// The registry: each optimizer's name, kind and maker, once.
struct Entry {
  const char* name;
  OptimizerKind kind;
  std::function<std::unique_ptr<Optimizer>(const Named&, const std::vector<std::string>&, const OptimizerOptions&)> make;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"sgd", OptimizerKind::kSgd,
       [](const Named& n, const std::vector<std::string>& nd, const OptimizerOptions& o) {
         return std::unique_ptr<Optimizer>(std::make_unique<Sgd>(n, nd, o.sgd));
       }},
      {"lars", OptimizerKind::kLars,
       [](const Named& n, const std::vector<std::string>& nd, const OptimizerOptions& o) {
         return std::unique_ptr<Optimizer>(std::make_unique<Lars>(n, nd, o.sgd, o.lars));
       }},
      {"lamb", OptimizerKind::kLamb,
       [](const Named& n, const std::vector<std::string>& nd, const OptimizerOptions& o) {
         return std::unique_ptr<Optimizer>(std::make_unique<Lamb>(n, nd, o.sgd.weight_decay, o.lamb));
       }},
  };
  return entries;
}

}  // namespace

const std::vector<std::pair<std::string, OptimizerKind>>& optimizer_names() {
  static const std::vector<std::pair<std::string, OptimizerKind>> names = [] {
    std::vector<std::pair<std::string, OptimizerKind>> out;
    for (const Entry& e : registry()) out.emplace_back(e.name, e.kind);
    return out;
  }();
  return names;
}

const char* name_of(OptimizerKind kind) {
  for (const Entry& e : registry()) {
    if (e.kind == kind) return e.name;
  }
  return "?";
}

void Optimizer::zero_grad() {
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad().reset();
  }
}

std::unique_ptr<Optimizer> make_optimizer(const Named& named, const std::vector<std::string>& no_decay,
                                          const OptimizerOptions& options) {
  for (const Entry& e : registry()) {
    if (e.kind == options.kind) return e.make(named, no_decay, options);
  }
  throw std::invalid_argument("no optimizer registered for this kind");  // unreachable: every kind is in the table
}

std::vector<ParamGroup> decay_groups(const NamedParameters& named, const std::vector<std::string>& no_decay,
                                     double weight_decay, const std::vector<std::string>& skip) {
  std::vector<ParamGroup> groups(2);
  groups[0].weight_decay = weight_decay;
  for (const auto& [name, p] : named) {
    if (listed(skip, name)) continue;
    ParamGroup& g = groups[listed(no_decay, name) ? 1 : 0];
    g.names.push_back(name);
    g.params.push_back(p);
  }
  return groups;
}

std::vector<at::Tensor> tensors_of(const NamedParameters& named) {
  std::vector<at::Tensor> out;
  for (const auto& item : named) out.push_back(item.second);
  return out;
}

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::vector<std::string> bn_and_bias_names(const Named& named) {
  std::vector<std::string> out;
  for (const auto& [name, p] : named) {
    if (p.dim() <= 1) out.push_back(name);
  }
  return out;
}

}  // namespace pinfeed::engine
