// Where a crop lies in an image and how many pixels an image may have: plain arithmetic that both the JPEG room
// (data/jpeg/) and the transforms (data/transform/) use, kept below both so that neither includes the other's.
#pragma once

#include <cstdint>
#include <string>

namespace pinfeed::data {

struct CropBox {
  int x = 0, y = 0, w = 0, h = 0;  // in source pixels
  bool flip = false;
};

// The largest libjpeg DCT scale-down (8, 4, 2, else 1) that keeps the crop at least `size` on both sides: the
// crop-region decode shrinks by it for free, and the GPU path averages blocks of it to give the same pixels.
int reduction_for(const CropBox& box, int size);

// The crop `box` in the pixels of the image shrunk by `reduction` (scaled_width x scaled_height, libjpeg's
// rounded-up output size), clamped inside it: what the crop-region decode reads, and what the GPU path resizes.
CropBox scaled_crop(const CropBox& box, int scaled_width, int scaled_height, int reduction);

// Why an image of this size is refused under max_pixels (0: no limit), naming the limit; empty if it is not.
std::string pixel_limit_error(int64_t width, int64_t height, int64_t max_pixels);

}  // namespace pinfeed::data
