// One kernel for a whole batch: each decoded image's crop, averaged over reduction x reduction blocks (what
// libjpeg's DCT scaling gives the CPU path), resized bilinearly like cv::resize INTER_LINEAR, optionally
// mirrored, written as uint8 RGB into its place in the (B, S, S, 3) batch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pinfeed::gpu {

struct CropResizeJob {
  const uint8_t* src;  // interleaved RGB on the device: the whole image, or the part of it under the crop, from
                       // a corner at a multiple of `reduction` (so its blocks are the whole image's)
  int pitch;           // bytes per source row
  int width, height;   // of `src`, in full-size pixels
  int reduction;       // 1, 2, 4, 8: the crop is taken from the image shrunk by this (block means)
  int x, y, w, h;      // the crop in shrunk pixels, relative to `src`
  int flip;            // mirror horizontally
  int out_index;       // sample position in the batch
};

// jobs: `count` jobs in device memory; out: (B, size, size, 3) uint8 on the device.
void crop_resize(const CropResizeJob* jobs, int count, uint8_t* out, int size, cudaStream_t stream);

}  // namespace pinfeed::gpu
