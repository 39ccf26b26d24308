// fused_batch_norm where this build has no CUDA or no cuDNN headers: never available.
#include <stdexcept>

#include "model/batch_norm.h"
#include "model/graph_plans.h"

namespace pinfeed::model {

std::string fused_batch_norm_unavailable_reason() {
  return "this pinfeed was built without CUDA and cuDNN (fused BatchNorm is cuDNN's)";
}

std::string graph_batch_norm_unavailable_reason() { return fused_batch_norm_unavailable_reason(); }

torch::Tensor fused_batch_norm(const torch::Tensor&, const torch::Tensor&, torch::nn::BatchNorm2dImpl&, bool,
                               GraphBatchNorm) {
  throw std::runtime_error("fused_batch_norm: " + fused_batch_norm_unavailable_reason());
}

torch::Tensor conv_bn_add_relu(const torch::Tensor&, torch::nn::Conv2dImpl&, torch::nn::BatchNorm2dImpl&,
                               const torch::Tensor&, std::string& why) {
  why = fused_batch_norm_unavailable_reason();
  return torch::Tensor();
}

PlanCost build_graph_plans_ahead(int64_t, int64_t, c10::Device) { return {}; }  // no graph routes here

}  // namespace pinfeed::model
