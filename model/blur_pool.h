// FFCV's BlurPool (ffcv-imagenet train_imagenet.py, BlurPoolConv2d; Zhang 2019, "Making Convolutional Networks
// Shift-Invariant Again"): a fixed 3x3 binomial low-pass filter, [1 2 1]^T [1 2 1] / 16 per channel, stride 1,
// zero padding 1, run on the input of each strided convolution so that it samples less aliasing.
//
// No parameter and no registered buffer: the filter is made on the device at first use and kept here, so a
// state dict has torchvision's names and tensors with it on or off, and the EMA, checkpoints and rank broadcasts,
// which walk named_buffers(), never see it.
#pragma once

#include <torch/types.h>

namespace pinfeed::model {

class BlurPool {
 public:
  // (N, C, H, W) -> (N, C, H, W) blurred, in x's type and memory format; differentiable in x.
  torch::Tensor forward(const torch::Tensor& x);

 private:
  // (C, 1, 3, 3): the depthwise filter in the last input's type, device and memory format; remade when they change.
  torch::Tensor filter_;
  c10::MemoryFormat format_ = c10::MemoryFormat::Contiguous;  // the input's, which filter_ was made for
};

}  // namespace pinfeed::model
