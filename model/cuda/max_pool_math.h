// The per-element arithmetic of ResNet's stem max pool (3x3 window, stride 2, padding 1) for the kernels in
// max_pool.cu, written once for the device and the host so that a CPU test checks it against ATen's max pool.
// No CUDA types: PINFEED_HD marks the functions __host__ __device__ under nvcc. The index type I is a template
// parameter: the kernels use 32-bit indices where the tensors allow it (64-bit division is many instructions on
// a GPU). The loops have constant trip counts so that, unrolled, the kernels keep the window in registers.
#pragma once

#include <cmath>  // INFINITY
#include <cstdint>

#ifdef __CUDACC__
#define PINFEED_HD __host__ __device__
#else
#define PINFEED_HD
#endif
#ifdef __CUDA_ARCH__  // the device pass only: the host compiler does not know the pragma
#define PINFEED_UNROLL _Pragma("unroll")
#else
#define PINFEED_UNROLL
#endif

namespace pinfeed::model::pool {

constexpr int kWindow = 3, kStride = 2, kPad = 1;

template <class I>
PINFEED_HD inline I out_size(I in) {
  return (in + 2 * kPad - kWindow) / kStride + 1;
}

// The max of output (oh, ow)'s window and the offset kh * 3 + kw of the element that gave it, as ATen's max pool
// picks it: scanning rows then columns, a larger value or a NaN replaces the max, so ties keep the first and a
// NaN wins; a window of -inf keeps its first element. in(kh, kw) reads the window's element as float; it is
// called only for elements inside the h x w input.
template <class I, class In>
PINFEED_HD inline void window_max(const In& in, I h, I w, I oh, I ow, float* max_out, uint8_t* offset_out) {
  const I h0 = oh * kStride - kPad, w0 = ow * kStride - kPad;
  float max = -INFINITY;
  int offset = -1;
PINFEED_UNROLL
  for (int kh = 0; kh < kWindow; ++kh) {
PINFEED_UNROLL
    for (int kw = 0; kw < kWindow; ++kw) {
      if (h0 + kh < 0 || h0 + kh >= h || w0 + kw < 0 || w0 + kw >= w) continue;
      const float v = in(kh, kw);
      if (offset < 0 || v > max || v != v) {  // v != v: NaN
        max = v;
        offset = kh * kWindow + kw;
      }
    }
  }
  *max_out = max;
  *offset_out = static_cast<uint8_t>(offset);
}

// The first of the (one or two) output rows whose window holds input row i, and how many there are: output row o
// covers input rows 2 o - 1 .. 2 o + 1. The same for columns.
template <class I>
PINFEED_HD inline void windows_over(I i, I out_n, I* first, int* count) {
  const I lo = i + kPad - (kWindow - 1) <= 0 ? 0 : (i + kPad - (kWindow - 1) + kStride - 1) / kStride;
  const I hi = (i + kPad) / kStride < out_n - 1 ? (i + kPad) / kStride : out_n - 1;
  *first = lo;
  *count = static_cast<int>(hi - lo + 1);
}

// The gradient of input (ih, iw): the sum of the output gradients of the windows (at most 2 x 2) whose max it
// gave. grad(dh, dw) and offset(dh, dw) read the output gradient (as float) and the window offset of output
// (oh_first + dh, ow_first + dw), with oh_first, ow_first from windows_over.
template <class I, class Grad, class Offset>
PINFEED_HD inline float input_grad(const Grad& grad, const Offset& offset, I out_h, I out_w, I ih, I iw) {
  I oh_first, ow_first;
  int oh_count, ow_count;
  windows_over(ih, out_h, &oh_first, &oh_count);
  windows_over(iw, out_w, &ow_first, &ow_count);
  float sum = 0;
PINFEED_UNROLL
  for (int dh = 0; dh < 2; ++dh) {
PINFEED_UNROLL
    for (int dw = 0; dw < 2; ++dw) {
      if (dh >= oh_count || dw >= ow_count) continue;
      const I kh = ih - ((oh_first + dh) * kStride - kPad), kw = iw - ((ow_first + dw) * kStride - kPad);
      if (offset(dh, dw) == kh * kWindow + kw) sum += grad(dh, dw);
    }
  }
  return sum;
}

}  // namespace pinfeed::model::pool
