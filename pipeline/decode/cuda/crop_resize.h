// One kernel for a whole batch, writing the model's input: each image's crop, averaged over reduction x reduction
// blocks (what libjpeg's DCT scaling gives the CPU path), resized bilinearly like cv::resize INTER_LINEAR,
// rounded to uint8 as the CPU path's pixels are, optionally mirrored, then normalised into its place in the
// (B, 3, S, S) batch (or (B, 4, S, S): the fourth channel zero), float32 or float16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pinfeed::pipeline {

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

// The batch the kernel writes: (B, channels, S, S) on the device, any strides (contiguous or channels_last), and
// the normalisation of a uint8 pixel u of channel c, u * scale[c] + shift[c] (data::uint8_normalisation),
// computed in float32 and rounded once to the batch's type; or, with `bytes`, the uint8 pixel u itself (scale 1,
// shift 0), for the Feeder to augment before it normalises.
struct ModelInput {
  void* data;
  bool half;     // float16 elements, else float32 (or uint8 with `bytes`)
  bool bytes;    // uint8 elements: the pixels, not normalised; 3 channels
  int channels;  // 3, or 4: RGB and a zero channel
  int64_t sample_stride, channel_stride, row_stride, column_stride;  // in elements
  float scale[3], shift[3];
};

// jobs: `count` jobs in device memory; size: S.
void crop_resize(const CropResizeJob* jobs, int count, const ModelInput& out, int size, cudaStream_t stream);

}  // namespace pinfeed::pipeline
