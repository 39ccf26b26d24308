#include "pipeline/cuda/crop_resize.h"

#include <cuda_fp16.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace pinfeed::gpu {
namespace {

// A pixel of the image shrunk by `r`: the mean of its r x r block of full-size pixels (clipped at the edge of
// `src`, which a block crosses only where it is the image's edge), as libjpeg's scaled IDCT approximately gives.
__device__ float shrunk(const CropResizeJob& j, int X, int Y, int c) {
  if (j.reduction == 1) return j.src[static_cast<size_t>(Y) * j.pitch + X * 3 + c];
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

__device__ void store(float* p, float v) { *p = v; }
__device__ void store(__half* p, float v) { *p = __float2half_rn(v); }

template <typename T>
__global__ void crop_resize_kernel(const CropResizeJob* jobs, ModelInput out, int size) {
  const CropResizeJob j = jobs[blockIdx.z];
  const int ox = blockIdx.x * blockDim.x + threadIdx.x, oy = blockIdx.y * blockDim.y + threadIdx.y;
  if (ox >= size || oy >= size) return;
  int x0, x1, y0, y1;
  float ax, ay;
  source_coord(ox, static_cast<float>(j.w) / size, j.w, &x0, &x1, &ax);
  source_coord(oy, static_cast<float>(j.h) / size, j.h, &y0, &y1, &ay);
  const int dx = j.flip ? size - 1 - ox : ox;
  T* dst = static_cast<T*>(out.data) + j.out_index * out.sample_stride + oy * out.row_stride + dx * out.column_stride;
  for (int c = 0; c < 3; ++c) {
    const float top = (1 - ax) * shrunk(j, j.x + x0, j.y + y0, c) + ax * shrunk(j, j.x + x1, j.y + y0, c);
    const float bottom = (1 - ax) * shrunk(j, j.x + x0, j.y + y1, c) + ax * shrunk(j, j.x + x1, j.y + y1, c);
    const float v = (1 - ay) * top + ay * bottom;
    const float u = truncf(fminf(fmaxf(v + 0.5f, 0.f), 255.f));  // the uint8 pixel the CPU path would hold
    // Rounded multiply, then rounded add (no fused multiply-add): the values the Feeder's uint8 path computes.
    store(dst + c * out.channel_stride, __fadd_rn(__fmul_rn(u, out.scale[c]), out.shift[c]));
  }
  if (out.channels == 4) store(dst + 3 * out.channel_stride, 0.f);
}

}  // namespace

void crop_resize(const CropResizeJob* jobs, int count, const ModelInput& out, int size, cudaStream_t stream) {
  if (count == 0) return;
  const dim3 block(32, 8);
  const dim3 grid((size + block.x - 1) / block.x, (size + block.y - 1) / block.y, count);
  if (out.half) {
    crop_resize_kernel<__half><<<grid, block, 0, stream>>>(jobs, out, size);
  } else {
    crop_resize_kernel<float><<<grid, block, 0, stream>>>(jobs, out, size);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string("crop_resize launch: ") + cudaGetErrorString(err));
}

}  // namespace pinfeed::gpu
