// The graph route of fused_batch_norm where the build found no cuDNN frontend headers.
#include "model/cuda/batch_norm_graph.h"
#include "model/graph_plans.h"

#include <ATen/core/Tensor.h>

namespace pinfeed::model::detail {

std::string graph_batch_norm_unavailable_reason() {
  return "this pinfeed was built without the cuDNN frontend's headers (the nvidia-cudnn-frontend wheel's include/; "
         "scripts/setup.sh installs it)";
}

at::Tensor graph_batch_norm(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, double, double, std::string& why) {
  why = graph_batch_norm_unavailable_reason();
  return at::Tensor();
}

at::Tensor graph_conv_bn_add_relu(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                  const at::Tensor&, const at::Tensor&, const at::Tensor&, double, double,
                                  std::string& why) {
  why = graph_batch_norm_unavailable_reason();
  return at::Tensor();
}

}  // namespace pinfeed::model::detail

namespace pinfeed::model {
PlanCost build_graph_plans_ahead(int64_t, int64_t, c10::Device) { return {}; }  // no graph routes here
}  // namespace pinfeed::model
