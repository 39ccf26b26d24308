// The uint8 batch to the model's input. The ATen chain (any device): normalise(), then the Augmenter's apply_batch,
// then model_input(): about six passes over a float32 batch. On CUDA without erasing, normalise_mix() does it in
// one kernel (cuda/normalise_mix.cu) with the chain's values bit for bit: u * scale + shift and each Mixup term
// rounded separately in float32 (no fused multiply-add), then one rounding to the input's type.
// No CUDA types here: built without CUDA, normalise_mix() throws.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include "data/transform/transforms.h"
#include "pipeline/augment/mixup.h"

namespace pinfeed::pipeline::augment {

// pixels: (B, S, S, 3) uint8 -> (B, 3, S, S) float32 with channels_last strides, u * scale + shift; scale, shift:
// (1, 3, 1, 1) float32 on the pixels' device. The uint8 -> float cast happens inside the multiply.
at::Tensor normalise(const at::Tensor& pixels, const at::Tensor& scale, const at::Tensor& shift);

// images: (B, 3, S, S) float32 -> (B, channels, S, S) of `dtype` with channels_last strides, rounded once from
// float32 (as the GPU decoder's kernel does); channels 4: a zero fourth. float32 and 3 channels: images itself.
at::Tensor model_input(const at::Tensor& images, int channels, at::ScalarType dtype);

// normalise(), mix()'s images (draw not mixed: lam 1) and model_input() in one kernel issued on `stream`, where
// the output is allocated. pixels: (B, S, S, 3) uint8 on CUDA; dtype float32 or float16. The labels stay mix()'s
// (soft_targets).
at::Tensor normalise_mix(const at::Tensor& pixels, const data::PixelAffine& affine, const MixDraw& draw, int channels,
                         at::ScalarType dtype, const c10::Stream& stream);

}  // namespace pinfeed::pipeline::augment
