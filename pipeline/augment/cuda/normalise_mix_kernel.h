// Launcher of normalise_mix.cu's kernel: raw pointers, on an explicit stream. The tensor API is normalise_mix.h's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pinfeed::pipeline::augment::kernel {

struct NormaliseMix {
  float scale[3], shift[3];  // x = u * scale[c] + shift[c]
  bool blend;                // Mixup: x_i * lam + x_j * other, j = B - 1 - i
  float lam, other;          // (float) lam and (float) (1 - lam), as ATen casts the double scalars
  int yl, yh, xl, xh;        // CutMix: rows [yl, yh) and columns [xl, xh) come from image j (empty: none)
};

// pixels: (batch, size, size, 3) uint8, contiguous; out: (batch, size, size, channels) float32 (half false) or
// float16, contiguous, channels 3 or 4 (the fourth zero).
void normalise_mix(const uint8_t* pixels, void* out, bool half, int channels, int batch, int size,
                   const NormaliseMix& params, cudaStream_t stream);

}  // namespace pinfeed::pipeline::augment::kernel
