// The stem max pool's kernels, NHWC: the forward keeps each window's argmax as a one-byte offset, and the
// backward gathers, one thread per input pixel summing the gradients of the (at most 2 x 2) windows it won,
// instead of scattering through int64 indices into a zero-filled gradient as ATen's does. One pass over each
// tensor, no atomics, an eighth of the index bytes.
//
// Each thread handles one 16-byte vector of channels (8 of bf16/fp16, 4 of float) so that every load and store is
// a full 16-byte access, and indexes with 32 bits where the tensor allows it. The per-element arithmetic is
// max_pool_math.h's, applied to each channel of the vectors held in registers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "model/cuda/max_pool_kernels.h"
#include "model/cuda/max_pool_math.h"

namespace pinfeed::model::pool {
namespace {

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__half v) { return __half2float(v); }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ inline T from_float(float v);
template <> __device__ inline float from_float<float>(float v) { return v; }
template <> __device__ inline __half from_float<__half>(float v) { return __float2half(v); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// V neighbouring channels, loaded and stored as one access.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <class I>
__device__ inline I first_index() { return static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + threadIdx.x; }
template <class I>
__device__ inline I grid_stride() { return static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x); }

// One thread per output pixel and vector of V channels; a warp covers neighbouring vectors and pixels.
template <class T, int V, class I>
__global__ void __launch_bounds__(256) forward_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                      uint8_t* __restrict__ offsets, I n, I h, I w, I c) {
  using Vec = Pack<T, V>;
  const I vectors = c / V, oh_n = out_size(h), ow_n = out_size(w), total = n * oh_n * ow_n * vectors;
  for (I i = first_index<I>(); i < total; i += grid_stride<I>()) {
    I rest = i;
    const I v = rest % vectors;
    rest /= vectors;
    const I ow = rest % ow_n;
    rest /= ow_n;
    const I oh = rest % oh_n, b = rest / oh_n;
    const I h0 = oh * kStride - kPad, w0 = ow * kStride - kPad;
    const T* image = x + b * h * w * c + v * V;
    Vec window[kWindow][kWindow];
    PINFEED_UNROLL
    for (int kh = 0; kh < kWindow; ++kh) {
      PINFEED_UNROLL
      for (int kw = 0; kw < kWindow; ++kw) {
        const I ih = h0 + kh, iw = w0 + kw;
        if (ih >= 0 && ih < h && iw >= 0 && iw < w) window[kh][kw] = *reinterpret_cast<const Vec*>(image + (ih * w + iw) * c);
      }
    }
    Vec max;
    Pack<uint8_t, V> offset;
    PINFEED_UNROLL
    for (int j = 0; j < V; ++j) {
      float m;
      window_max([&](int kh, int kw) { return to_float(window[kh][kw].v[j]); }, h, w, oh, ow, &m, &offset.v[j]);
      max.v[j] = from_float<T>(m);
    }
    reinterpret_cast<Vec*>(y)[i] = max;
    reinterpret_cast<Pack<uint8_t, V>*>(offsets)[i] = offset;
  }
}

// One thread per input pixel and vector of V channels.
template <class T, int V, class I>
__global__ void __launch_bounds__(256) backward_kernel(const T* __restrict__ grad_y, const uint8_t* __restrict__ offsets,
                                                       T* __restrict__ grad_x, I n, I h, I w, I c) {
  using Vec = Pack<T, V>;
  using Offsets = Pack<uint8_t, V>;
  const I vectors = c / V, oh_n = out_size(h), ow_n = out_size(w), total = n * h * w * vectors;
  for (I i = first_index<I>(); i < total; i += grid_stride<I>()) {
    I rest = i;
    const I v = rest % vectors;
    rest /= vectors;
    const I iw = rest % w;
    rest /= w;
    const I ih = rest % h, b = rest / h;
    I oh_first, ow_first;
    int oh_count, ow_count;
    windows_over(ih, oh_n, &oh_first, &oh_count);
    windows_over(iw, ow_n, &ow_first, &ow_count);
    Vec grad[2][2];
    Offsets offset[2][2];
    PINFEED_UNROLL
    for (int dh = 0; dh < 2; ++dh) {
      PINFEED_UNROLL
      for (int dw = 0; dw < 2; ++dw) {
        if (dh >= oh_count || dw >= ow_count) continue;
        const I k = ((b * oh_n + oh_first + dh) * ow_n + ow_first + dw) * vectors + v;
        grad[dh][dw] = reinterpret_cast<const Vec*>(grad_y)[k];
        offset[dh][dw] = reinterpret_cast<const Offsets*>(offsets)[k];
      }
    }
    Vec sum;
    PINFEED_UNROLL
    for (int j = 0; j < V; ++j) {
      sum.v[j] = from_float<T>(input_grad([&](int dh, int dw) { return to_float(grad[dh][dw].v[j]); },
                                          [&](int dh, int dw) { return static_cast<int>(offset[dh][dw].v[j]); }, oh_n,
                                          ow_n, ih, iw));
    }
    reinterpret_cast<Vec*>(grad_x)[i] = sum;
  }
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A grid-stride loop over `total` threads' work: enough blocks to fill the GPU several times over, no more.
constexpr int64_t kThreads = 256, kMaxBlocks = 65536;
unsigned blocks_for(int64_t total) {
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

// 32-bit indices when every index, and the last grid-stride step past the end, stays below 2^31.
bool fits_32_bits(int64_t elements) { return elements < INT_MAX - kThreads * kMaxBlocks; }

bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class T, int V, class I>
void run_forward(const void* x, void* y, uint8_t* offsets, int64_t n, int64_t h, int64_t w, int64_t c,
                 cudaStream_t stream) {
  const int64_t total = n * out_size(h) * out_size(w) * (c / V);
  forward_kernel<T, V, I><<<blocks_for(total), kThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<T*>(y), offsets, static_cast<I>(n), static_cast<I>(h), static_cast<I>(w),
      static_cast<I>(c));
  check_launch("max pool forward");
}

template <class T, int V, class I>
void run_backward(const void* grad_y, const uint8_t* offsets, void* grad_x, int64_t n, int64_t h, int64_t w,
                  int64_t c, cudaStream_t stream) {
  const int64_t total = n * h * w * (c / V);
  backward_kernel<T, V, I><<<blocks_for(total), kThreads, 0, stream>>>(
      static_cast<const T*>(grad_y), offsets, static_cast<T*>(grad_x), static_cast<I>(n), static_cast<I>(h),
      static_cast<I>(w), static_cast<I>(c));
  check_launch("max pool backward");
}

// Picks the vector width (16 bytes when the channels and pointers allow, else one element) and the index width,
// then calls run(std::integral_constant<int, V>, I{}).
template <class T, class Run>
void dispatch(int64_t elements, int64_t c, bool aligned, const Run& run) {
  constexpr int kVector = 16 / sizeof(T);
  const bool vector = c % kVector == 0 && aligned;
  const bool small = fits_32_bits(elements);
  if (vector && small) return run(std::integral_constant<int, kVector>{}, int32_t{});
  if (vector) return run(std::integral_constant<int, kVector>{}, int64_t{});
  if (small) return run(std::integral_constant<int, 1>{}, int32_t{});
  run(std::integral_constant<int, 1>{}, int64_t{});
}

template <class T>
void launch_forward(const void* x, void* y, uint8_t* offsets, int64_t n, int64_t h, int64_t w, int64_t c,
                    cudaStream_t stream) {
  if (n * out_size(h) * out_size(w) * c == 0) return;
  const bool aligned = aligned_16(x) && aligned_16(y) && aligned_16(offsets);
  dispatch<T>(n * h * w * c, c, aligned, [&](auto vector, auto index) {
    run_forward<T, decltype(vector)::value, decltype(index)>(x, y, offsets, n, h, w, c, stream);
  });
}

template <class T>
void launch_backward(const void* grad_y, const uint8_t* offsets, void* grad_x, int64_t n, int64_t h, int64_t w,
                     int64_t c, cudaStream_t stream) {
  if (n * h * w * c == 0) return;
  const bool aligned = aligned_16(grad_y) && aligned_16(offsets) && aligned_16(grad_x);
  dispatch<T>(n * h * w * c, c, aligned, [&](auto vector, auto index) {
    run_backward<T, decltype(vector)::value, decltype(index)>(grad_y, offsets, grad_x, n, h, w, c, stream);
  });
}

}  // namespace

void forward(Dtype dtype, const void* x, void* y, uint8_t* offsets, int64_t n, int64_t h, int64_t w, int64_t c,
             cudaStream_t stream) {
  switch (dtype) {
    case Dtype::kFloat: return launch_forward<float>(x, y, offsets, n, h, w, c, stream);
    case Dtype::kHalf: return launch_forward<__half>(x, y, offsets, n, h, w, c, stream);
    case Dtype::kBFloat16: return launch_forward<__nv_bfloat16>(x, y, offsets, n, h, w, c, stream);
  }
}

void backward(Dtype dtype, const void* grad_y, const uint8_t* offsets, void* grad_x, int64_t n, int64_t h, int64_t w,
              int64_t c, cudaStream_t stream) {
  switch (dtype) {
    case Dtype::kFloat: return launch_backward<float>(grad_y, offsets, grad_x, n, h, w, c, stream);
    case Dtype::kHalf: return launch_backward<__half>(grad_y, offsets, grad_x, n, h, w, c, stream);
    case Dtype::kBFloat16: return launch_backward<__nv_bfloat16>(grad_y, offsets, grad_x, n, h, w, c, stream);
  }
}

}  // namespace pinfeed::model::pool
