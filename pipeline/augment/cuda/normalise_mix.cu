#include "pipeline/augment/cuda/normalise_mix_kernel.h"

#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

namespace pinfeed::pipeline::augment::kernel {
namespace {

constexpr int kThreads = 256;

// ATen's mul (uint8 promoted to float), then its add: two roundings, which __fmul_rn/__fadd_rn keep nvcc from
// contracting into one fused multiply-add.
__device__ float normalised(uint8_t u, const NormaliseMix& p, int c) {
  return __fadd_rn(__fmul_rn(static_cast<float>(u), p.scale[c]), p.shift[c]);
}

__device__ float cast(float v, float) { return v; }
__device__ __half cast(float v, __half) { return __float2half_rn(v); }

// One output pixel, aligned so that a padded pixel is one 8- or 16-byte store.
template <typename T, int kChannels>
struct alignas(kChannels == 4 ? 4 * sizeof(T) : sizeof(T)) Pixel {
  T c[kChannels];
};

// A thread per pixel: blockIdx.y is the image, blockIdx.x a run of its pixels.
template <typename T, int kChannels>
__global__ void normalise_mix_kernel(const uint8_t* pixels, Pixel<T, kChannels>* out, int batch, int size,
                                     NormaliseMix p) {
  const int area = size * size;
  const int r = blockIdx.x * kThreads + threadIdx.x;
  if (r >= area) return;
  const int i = blockIdx.y, j = batch - 1 - i;
  const int y = r / size, x = r % size;
  const bool boxed = y >= p.yl && y < p.yh && x >= p.xl && x < p.xh;
  const uint8_t* own = pixels + (static_cast<int64_t>(boxed ? j : i) * area + r) * 3;
  const uint8_t* mirror = pixels + (static_cast<int64_t>(j) * area + r) * 3;
  Pixel<T, kChannels> px;
#pragma unroll
  for (int c = 0; c < 3; ++c) {
    float v = normalised(own[c], p, c);
    // timm's x.mul_(lam).add_(x.flip(0).mul_(1 - lam)): each product rounded, then the sum.
    if (p.blend) v = __fadd_rn(__fmul_rn(v, p.lam), __fmul_rn(normalised(mirror[c], p, c), p.other));
    px.c[c] = cast(v, T());
  }
  if constexpr (kChannels == 4) px.c[3] = cast(0.f, T());
  out[static_cast<int64_t>(i) * area + r] = px;
}

template <typename T, int kChannels>
void launch(const uint8_t* pixels, void* out, int batch, int size, const NormaliseMix& p, cudaStream_t stream) {
  const dim3 grid((size * size + kThreads - 1) / kThreads, batch);
  normalise_mix_kernel<T, kChannels><<<grid, kThreads, 0, stream>>>(pixels, static_cast<Pixel<T, kChannels>*>(out),
                                                                      batch, size, p);
}

}  // namespace

void normalise_mix(const uint8_t* pixels, void* out, bool half, int channels, int batch, int size,
                   const NormaliseMix& params, cudaStream_t stream) {
  if (batch == 0 || size == 0) return;
  if (half && channels == 4) launch<__half, 4>(pixels, out, batch, size, params, stream);
  else if (half) launch<__half, 3>(pixels, out, batch, size, params, stream);
  else if (channels == 4) launch<float, 4>(pixels, out, batch, size, params, stream);
  else launch<float, 3>(pixels, out, batch, size, params, stream);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string("normalise_mix launch: ") + cudaGetErrorString(err));
}

}  // namespace pinfeed::pipeline::augment::kernel
