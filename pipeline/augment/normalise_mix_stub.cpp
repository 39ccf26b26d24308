// normalise_mix where this build has no CUDA: never available.
#include <stdexcept>

#include "pipeline/augment/normalise_mix.h"

namespace pinfeed::pipeline::augment {

at::Tensor normalise_mix(const at::Tensor&, const data::PixelAffine&, const MixDraw&, int, at::ScalarType,
                         const c10::Stream&) {
  throw std::runtime_error("normalise_mix: this pinfeed was built without CUDA");
}

}  // namespace pinfeed::pipeline::augment
