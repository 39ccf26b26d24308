// The graph route of fused_batch_norm where the build found no cuDNN frontend headers.
#include "model/cuda/batch_norm_graph.h"

#include <c10/util/Exception.h>

namespace pinfeed::model::detail {

std::string graph_batch_norm_unavailable_reason() {
  return "this pinfeed was built without the cuDNN frontend's headers (the nvidia-cudnn-frontend wheel's include/; "
         "scripts/setup.sh installs it)";
}

std::string graph_batch_norm_unsupported(const at::Tensor&, bool, double, double) {
  return graph_batch_norm_unavailable_reason();
}

at::Tensor graph_batch_norm(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, double, double) {
  TORCH_CHECK(false, "graph BatchNorm: ", graph_batch_norm_unavailable_reason());
}

}  // namespace pinfeed::model::detail
