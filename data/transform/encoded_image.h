// A sample left for the GPU to decode (data.decoder = "nvjpeg"): the loader's workers read the file, parse its
// header and draw its crop exactly as the CPU path would, and leave the pixels to the device.
#pragma once

#include <cstdint>
#include <vector>

#include "data/jpeg/jpeg_header.h"
#include "data/transform/transforms.h"

namespace pinfeed::data {

struct EncodedImage {
  JpegRoute kind = JpegRoute::kCpu;  // kCpu: decoded on the CPU, its pixels are in the batch slot already
  std::vector<uint8_t> bytes;         // the whole file (grows only: a warm slot allocates nothing)
  int width = 0, height = 0;          // from the header
  CropBox box;                        // in full-size pixels, the CPU path's draw for (seed, epoch, index)
  int reduction = 1;                  // the CPU path's DCT scale (reduction_for): the GPU averages blocks of it
};

}  // namespace pinfeed::data
