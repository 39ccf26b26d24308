// Launchers of the stem max pool's kernels (max_pool.cu): NHWC tensors as raw pointers, on an explicit stream.
// The autograd function around them is max_pool.cpp's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pinfeed::model::pool {

enum class Dtype { kFloat, kHalf, kBFloat16 };

// x: (n, h, w, c); y and offsets: (n, out_size(h), out_size(w), c). offsets: each window's argmax as kh * 3 + kw.
void forward(Dtype dtype, const void* x, void* y, uint8_t* offsets, int64_t n, int64_t h, int64_t w, int64_t c,
             cudaStream_t stream);
// grad_x: (n, h, w, c), every element written (no zero fill needed).
void backward(Dtype dtype, const void* grad_y, const uint8_t* offsets, void* grad_x, int64_t n, int64_t h, int64_t w,
              int64_t c, cudaStream_t stream);

}  // namespace pinfeed::model::pool
