#include "pipeline/augment/normalise_mix.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>

namespace pinfeed::pipeline::augment {

at::Tensor normalise(const at::Tensor& pixels, const at::Tensor& scale, const at::Tensor& shift) {
  // The permuted view already has channels_last strides, which the product keeps.
  return pixels.permute({0, 3, 1, 2}).mul(scale).add_(shift);
}

at::Tensor model_input(const at::Tensor& images, int channels, at::ScalarType dtype) {
  if (dtype == at::kFloat && channels == 3) return images;
  const int64_t b = images.size(0), s = images.size(2);
  at::Tensor out = at::empty({b, s, s, channels}, images.options().dtype(dtype));
  out.narrow(3, 0, 3).copy_(images.permute({0, 2, 3, 1}));
  if (channels == 4) out.select(3, 3).zero_();
  return out.permute({0, 3, 1, 2});  // channels_last strides
}

}  // namespace pinfeed::pipeline::augment
