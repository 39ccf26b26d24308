// One kernel for a whole batch: each decoded image's crop, averaged over reduction x reduction blocks (what
// libjpeg's DCT scaling gives the CPU path), resized bilinearly like cv::resize INTER_LINEAR, optionally
// mirrored, written as uint8 RGB into its place in the (B, S, S, 3) batch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pinfeed::gpu {

struct CropResizeJob {
  const uint8_t* src;  // full-size interleaved RGB on the device
  int pitch;           // bytes per source row
  int width, height;   // full-size
  int reduction;       // 1, 2, 4, 8: the crop is taken from the image shrunk by this (block means)
  int x, y, w, h;      // the crop in the shrunk image's pixels
  int flip;            // mirror horizontally
  int out_index;       // sample position in the batch
};

// jobs: `count` jobs in device memory; out: (B, size, size, 3) uint8 on the device.
void crop_resize(const CropResizeJob* jobs, int count, uint8_t* out, int size, cudaStream_t stream);

}  // namespace pinfeed::gpu
