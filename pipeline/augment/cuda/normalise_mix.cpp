// normalise_mix around normalise_mix.cu's kernel, on the caller's stream.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

#include "pipeline/augment/cuda/normalise_mix_kernel.h"
#include "pipeline/augment/normalise_mix.h"

namespace pinfeed::pipeline::augment {

at::Tensor normalise_mix(const at::Tensor& pixels, const data::PixelAffine& affine, const MixDraw& draw, int channels,
                         at::ScalarType dtype, const c10::Stream& stream) {
  TORCH_CHECK(pixels.is_cuda() && pixels.scalar_type() == at::kByte && pixels.dim() == 4 &&
                  pixels.size(1) == pixels.size(2) && pixels.size(3) == 3,
              "normalise_mix: pixels must be a (B, S, S, 3) uint8 CUDA tensor, got ", pixels.sizes(), " ",
              pixels.scalar_type(), " on ", pixels.device());
  TORCH_CHECK((dtype == at::kFloat || dtype == at::kHalf) && (channels == 3 || channels == 4),
              "normalise_mix: float32 or float16 output of 3 or 4 channels, got ", dtype, " with ", channels);
  const c10::cuda::CUDAStream cuda_stream(stream);
  const c10::cuda::CUDAStreamGuard guard(cuda_stream);  // the output is allocated on, and written by, it
  const at::Tensor in = pixels.contiguous();
  const int64_t b = in.size(0), s = in.size(1);
  at::Tensor out = at::empty({b, s, s, channels}, in.options().dtype(dtype));
  kernel::NormaliseMix p{};
  std::copy(affine.scale, affine.scale + 3, p.scale);
  std::copy(affine.shift, affine.shift + 3, p.shift);
  // mix(): the double scalars lam and 1 - lam, cast to float as ATen's float32 multiply casts them.
  p.blend = draw.mixed() && !draw.cutmix;
  p.lam = static_cast<float>(draw.lam);
  p.other = static_cast<float>(1.0 - draw.lam);
  if (draw.mixed() && draw.cutmix) {
    p.yl = draw.yl;
    p.yh = draw.yh;
    p.xl = draw.xl;
    p.xh = draw.xh;
  }
  kernel::normalise_mix(in.const_data_ptr<uint8_t>(), out.data_ptr(), dtype == at::kHalf, channels,
                        static_cast<int>(b), static_cast<int>(s), p, cuda_stream.stream());
  return out.permute({0, 3, 1, 2});  // channels_last strides
}

}  // namespace pinfeed::pipeline::augment
