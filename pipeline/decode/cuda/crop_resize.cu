#include "pipeline/decode/cuda/crop_resize.h"

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace pinfeed::pipeline {
namespace {

// A thread computes its column's source coordinates once, then kRows rows of that column. The kernel runs on the
// decode's stream while the step runs, and its blocks fill the GPU ahead of the step's next kernel: the step
// waits about as long as this kernel lasts, so its length is the feed's cost; one pixel per thread and no reuse
// was several times slower (docs/gpu-decode.md#the-crop-kernel).
constexpr int kRows = 4;

// A pixel of the image shrunk by `r`: the mean of its r x r block of full-size pixels (clipped at the edge of
// `src`, which a block crosses only where it is the image's edge), as libjpeg's scaled IDCT approximately gives.
__device__ float shrunk(const CropResizeJob& j, int X, int Y, int c) {
  const int x0 = X * j.reduction, y0 = Y * j.reduction;
  const int x1 = min(x0 + j.reduction, j.width), y1 = min(y0 + j.reduction, j.height);
  float sum = 0;
  for (int yy = y0; yy < y1; ++yy) {
    const uint8_t* row = j.src + static_cast<size_t>(yy) * j.pitch + c;
    for (int xx = x0; xx < x1; ++xx) sum += row[xx * 3];
  }
  return sum / static_cast<float>((x1 - x0) * (y1 - y0));
}

// cv::resize INTER_LINEAR's source coordinate: half-pixel centres, clamped to the crop's first and last pixel.
__device__ void source_coord(int o, float scale, int n, int* i0, int* i1, float* a) {
  float f = (o + 0.5f) * scale - 0.5f;
  int i = static_cast<int>(floorf(f));
  float t = f - i;
  if (i < 0) { i = 0; t = 0; }
  if (i >= n - 1) { i = n - 1; t = 0; }
  *i0 = i;
  *i1 = min(i + 1, n - 1);
  *a = t;
}

// The bilinear value of each channel between the crop's pixels (x0|x1, y0|y1). Full-size crops (reduction 1, most
// of them) read their neighbours' bytes directly.
__device__ void bilinear(const CropResizeJob& j, int x0, int x1, float ax, int y0, int y1, float ay, float v[3]) {
  if (j.reduction == 1) {
    const uint8_t* r0 = j.src + static_cast<size_t>(j.y + y0) * j.pitch;
    const uint8_t* r1 = j.src + static_cast<size_t>(j.y + y1) * j.pitch;
    const int a = (j.x + x0) * 3, b = (j.x + x1) * 3;
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      const float top = (1 - ax) * r0[a + c] + ax * r0[b + c];
      const float bottom = (1 - ax) * r1[a + c] + ax * r1[b + c];
      v[c] = (1 - ay) * top + ay * bottom;
    }
    return;
  }
#pragma unroll
  for (int c = 0; c < 3; ++c) {
    const float top = (1 - ax) * shrunk(j, j.x + x0, j.y + y0, c) + ax * shrunk(j, j.x + x1, j.y + y0, c);
    const float bottom = (1 - ax) * shrunk(j, j.x + x0, j.y + y1, c) + ax * shrunk(j, j.x + x1, j.y + y1, c);
    v[c] = (1 - ay) * top + ay * bottom;
  }
}

// The uint8 pixel the CPU path would hold, normalised with a rounded multiply, then a rounded add (no fused
// multiply-add): the values the Feeder's uint8 path computes.
__device__ float normalised(float v, const ModelInput& out, int c) {
  const float u = truncf(fminf(fmaxf(v + 0.5f, 0.f), 255.f));
  return __fadd_rn(__fmul_rn(u, out.scale[c]), out.shift[c]);
}

__device__ void store(float* p, float v) { *p = v; }
__device__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ void store(uint8_t* p, float v) { *p = static_cast<uint8_t>(v); }  // v: a whole number in [0, 255]

// kPadded: float16 (B, 4, S, S) channels_last, the padded input of the fp16 step: one 8-byte store per pixel.
template <typename T, bool kPadded>
__global__ void crop_resize_kernel(const CropResizeJob* jobs, ModelInput out, int size) {
  __shared__ CropResizeJob job;
  if (threadIdx.x == 0 && threadIdx.y == 0) job = jobs[blockIdx.z];
  __syncthreads();
  const CropResizeJob& j = job;
  const int ox = blockIdx.x * blockDim.x + threadIdx.x;
  if (ox >= size) return;
  int x0, x1;
  float ax;
  source_coord(ox, static_cast<float>(j.w) / size, j.w, &x0, &x1, &ax);
  const int dx = j.flip ? size - 1 - ox : ox;
  T* column = static_cast<T*>(out.data) + j.out_index * out.sample_stride + dx * out.column_stride;
  const float yscale = static_cast<float>(j.h) / size;
  const int first = (blockIdx.y * blockDim.y + threadIdx.y) * kRows;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int oy = first + r;
    if (oy >= size) return;
    int y0, y1;
    float ay;
    source_coord(oy, yscale, j.h, &y0, &y1, &ay);
    float v[3];
    bilinear(j, x0, x1, ax, y0, y1, ay, v);
    T* dst = column + oy * out.row_stride;
    if constexpr (kPadded) {
      const __half2 rg = __floats2half2_rn(normalised(v[0], out, 0), normalised(v[1], out, 1));
      const __half2 b0 = __floats2half2_rn(normalised(v[2], out, 2), 0.f);
      uint2 pixel;
      pixel.x = *reinterpret_cast<const unsigned*>(&rg);
      pixel.y = *reinterpret_cast<const unsigned*>(&b0);
      *reinterpret_cast<uint2*>(dst) = pixel;
    } else {
      for (int c = 0; c < 3; ++c) store(dst + c * out.channel_stride, normalised(v[c], out, c));
      if (out.channels == 4) store(dst + 3 * out.channel_stride, 0.f);
    }
  }
}

}  // namespace

void crop_resize(const CropResizeJob* jobs, int count, const ModelInput& out, int size, cudaStream_t stream) {
  if (count == 0) return;
  const dim3 block(32, 8);
  const int rows_per_block = block.y * kRows;
  const dim3 grid((size + block.x - 1) / block.x, (size + rows_per_block - 1) / rows_per_block, count);
  const bool padded = out.half && out.channels == 4 && out.channel_stride == 1 && out.column_stride == 4 &&
                      reinterpret_cast<uintptr_t>(out.data) % 8 == 0;
  if (out.bytes) {
    crop_resize_kernel<uint8_t, false><<<grid, block, 0, stream>>>(jobs, out, size);
  } else if (padded) {
    crop_resize_kernel<__half, true><<<grid, block, 0, stream>>>(jobs, out, size);
  } else if (out.half) {
    crop_resize_kernel<__half, false><<<grid, block, 0, stream>>>(jobs, out, size);
  } else {
    crop_resize_kernel<float, false><<<grid, block, 0, stream>>>(jobs, out, size);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string("crop_resize launch: ") + cudaGetErrorString(err));
}

}  // namespace pinfeed::pipeline
