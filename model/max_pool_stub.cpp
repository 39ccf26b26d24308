// stem_max_pool where this build has no CUDA: never available.
#include <stdexcept>

#include "model/max_pool.h"

namespace pinfeed::model {

std::string stem_max_pool_unavailable_reason() { return "this pinfeed was built without CUDA"; }

torch::Tensor stem_max_pool(const torch::Tensor&) {
  throw std::runtime_error("stem_max_pool: " + stem_max_pool_unavailable_reason());
}

}  // namespace pinfeed::model
