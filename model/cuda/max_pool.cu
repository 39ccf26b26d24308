// The stem max pool's kernels, NHWC: the forward keeps each window's argmax as a one-byte offset, and the
// backward gathers, one thread per input element summing the gradients of the (at most 2 x 2) windows it won,
// instead of scattering through int64 indices into a zero-filled gradient as ATen's does. One pass over each
// tensor, no atomics, a quarter of the index bytes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

// One thread per output element, channels fastest: a warp reads 32 neighbouring channels of each window element.
template <class T>
__global__ void forward_kernel(const T* __restrict__ x, T* __restrict__ y, uint8_t* __restrict__ offsets, int64_t n,
                               int64_t h, int64_t w, int64_t c) {
  const int64_t oh_n = out_size(h), ow_n = out_size(w), total = n * oh_n * ow_n * c;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = i % c, ow = (i / c) % ow_n, oh = (i / c / ow_n) % oh_n, b = i / c / ow_n / oh_n;
    const T* image = x + b * h * w * c + ch;
    const auto in = [&](int64_t ih, int64_t iw) { return to_float(image[(ih * w + iw) * c]); };
    float max;
    uint8_t offset;
    window_max(in, h, w, oh, ow, &max, &offset);
    y[i] = from_float<T>(max);
    offsets[i] = offset;
  }
}

// One thread per input element.
template <class T>
__global__ void backward_kernel(const T* __restrict__ grad_y, const uint8_t* __restrict__ offsets,
                                T* __restrict__ grad_x, int64_t n, int64_t h, int64_t w, int64_t c) {
  const int64_t oh_n = out_size(h), ow_n = out_size(w), total = n * h * w * c;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = i % c, iw = (i / c) % w, ih = (i / c / w) % h, b = i / c / w / h;
    const int64_t base = b * oh_n * ow_n * c + ch;
    const auto grad = [&](int64_t oh, int64_t ow) { return to_float(grad_y[base + (oh * ow_n + ow) * c]); };
    const auto offset = [&](int64_t oh, int64_t ow) { return static_cast<int>(offsets[base + (oh * ow_n + ow) * c]); };
    grad_x[i] = from_float<T>(input_grad(grad, offset, oh_n, ow_n, ih, iw));
  }
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A grid-stride loop over `total` elements: enough blocks to fill the GPU several times over, no more.
unsigned blocks_for(int64_t total) {
  constexpr int64_t kMaxBlocks = 65536;
  const int64_t blocks = (total + 255) / 256;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

template <class T>
void launch_forward(const void* x, void* y, uint8_t* offsets, int64_t n, int64_t h, int64_t w, int64_t c,
                    cudaStream_t stream) {
  const int64_t total = n * out_size(h) * out_size(w) * c;
  if (total == 0) return;
  forward_kernel<T><<<blocks_for(total), 256, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), offsets, n,
                                                             h, w, c);
  check_launch("max pool forward");
}

template <class T>
void launch_backward(const void* grad_y, const uint8_t* offsets, void* grad_x, int64_t n, int64_t h, int64_t w,
                     int64_t c, cudaStream_t stream) {
  const int64_t total = n * h * w * c;
  if (total == 0) return;
  backward_kernel<T><<<blocks_for(total), 256, 0, stream>>>(static_cast<const T*>(grad_y), offsets,
                                                              static_cast<T*>(grad_x), n, h, w, c);
  check_launch("max pool backward");
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
