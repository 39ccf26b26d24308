#include "data/geometry.h"

#include <algorithm>

namespace pinfeed::data {

int reduction_for(const CropBox& box, int size) {
  for (int r : {8, 4, 2}) {
    if (box.w / r >= size && box.h / r >= size) return r;
  }
  return 1;
}

CropBox scaled_crop(const CropBox& box, int scaled_width, int scaled_height, int r) {
  CropBox s;
  s.x = std::clamp(box.x / r, 0, scaled_width - 1);
  s.y = std::clamp(box.y / r, 0, scaled_height - 1);
  s.w = std::clamp(box.w / r, 1, scaled_width - s.x);
  s.h = std::clamp(box.h / r, 1, scaled_height - s.y);
  s.flip = box.flip;
  return s;
}

std::string pixel_limit_error(int64_t width, int64_t height, int64_t max_pixels) {
  if (max_pixels <= 0 || width * height <= max_pixels) return "";
  return "image is " + std::to_string(width) + "x" + std::to_string(height) + " = " + std::to_string(width * height) +
         " pixels, over the limit max_image_pixels = " + std::to_string(max_pixels);
}

}  // namespace pinfeed::data
