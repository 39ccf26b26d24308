// The per-element arithmetic of ResNet's stem max pool (3x3 window, stride 2, padding 1) for the kernels in
// max_pool.cu, written once for the device and the host so that a CPU test checks it against ATen's max pool.
// No CUDA types: PINFEED_HD marks the functions __host__ __device__ under nvcc.
#pragma once

#include <cmath>  // INFINITY
#include <cstdint>

#ifdef __CUDACC__
#define PINFEED_HD __host__ __device__
#else
#define PINFEED_HD
#endif

namespace pinfeed::model::pool {

constexpr int kWindow = 3, kStride = 2, kPad = 1;

PINFEED_HD inline int64_t out_size(int64_t in) { return (in + 2 * kPad - kWindow) / kStride + 1; }

// The max of output (oh, ow)'s window and the offset kh * 3 + kw of the element that gave it, as ATen's max pool
// picks it: scanning rows then columns, a larger value or a NaN replaces the max, so ties keep the first and a
// NaN wins; a window of -inf keeps its first element. in(ih, iw) reads the input as float.
template <class In>
PINFEED_HD inline void window_max(const In& in, int64_t h, int64_t w, int64_t oh, int64_t ow, float* max_out,
                                  uint8_t* offset_out) {
  const int64_t h0 = oh * kStride - kPad, w0 = ow * kStride - kPad;
  float max = -INFINITY;
  int offset = -1;
  for (int kh = 0; kh < kWindow; ++kh) {
    const int64_t ih = h0 + kh;
    if (ih < 0 || ih >= h) continue;
    for (int kw = 0; kw < kWindow; ++kw) {
      const int64_t iw = w0 + kw;
      if (iw < 0 || iw >= w) continue;
      const float v = in(ih, iw);
      if (offset < 0 || v > max || v != v) {  // v != v: NaN
        max = v;
        offset = kh * kWindow + kw;
      }
    }
  }
  *max_out = max;
  *offset_out = static_cast<uint8_t>(offset);
}

// The gradient of input (ih, iw): the sum of the output gradients of the windows (at most 2 x 2) whose max it
// gave. grad(oh, ow) reads the output gradient as float, offset(oh, ow) the window's offset.
template <class Grad, class Offset>
PINFEED_HD inline float input_grad(const Grad& grad, const Offset& offset, int64_t out_h, int64_t out_w, int64_t ih,
                                   int64_t iw) {
  // Output row oh covers input rows 2 oh - 1 .. 2 oh + 1.
  const int64_t oh_first = ih + kPad - (kWindow - 1) <= 0 ? 0 : (ih + kPad - (kWindow - 1) + kStride - 1) / kStride;
  const int64_t oh_last = (ih + kPad) / kStride < out_h - 1 ? (ih + kPad) / kStride : out_h - 1;
  const int64_t ow_first = iw + kPad - (kWindow - 1) <= 0 ? 0 : (iw + kPad - (kWindow - 1) + kStride - 1) / kStride;
  const int64_t ow_last = (iw + kPad) / kStride < out_w - 1 ? (iw + kPad) / kStride : out_w - 1;
  float sum = 0;
  for (int64_t oh = oh_first; oh <= oh_last; ++oh) {
    for (int64_t ow = ow_first; ow <= ow_last; ++ow) {
      const int64_t kh = ih - (oh * kStride - kPad), kw = iw - (ow * kStride - kPad);
      if (offset(oh, ow) == kh * kWindow + kw) sum += grad(oh, ow);
    }
  }
  return sum;
}

}  // namespace pinfeed::model::pool
