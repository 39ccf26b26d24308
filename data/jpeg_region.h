// Decodes only the part of a JPEG a crop needs, with libjpeg-turbo: rows above the crop are skipped without
// IDCT (jpeg_skip_scanlines), rows below it are never decoded, columns outside it skip IDCT and colour
// conversion (jpeg_crop_scanline), and a DCT scale of 1/2, 1/4 or 1/8 shrinks a large crop for free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <opencv2/core/mat.hpp>

namespace pinfeed::data {

struct JpegRegion {
  cv::Mat pixels;  // BGR uint8 rows covering the crop (wider on the left: iMCU-aligned), over `buffer`
  cv::Rect crop;   // the requested crop inside `pixels`
};

// box: the crop in full-size source pixels; scale_denom: 1, 2, 4 or 8. The pixels live in `buffer`, which only
// grows, so a warm worker allocates nothing per image. Returns false (and decodes nothing) when libjpeg cannot
// handle the file (not a JPEG, CMYK, corrupt header): the caller falls back to a full decode.
bool decode_jpeg_region(const uint8_t* data, size_t size, const cv::Rect& box, int scale_denom,
                        std::vector<uint8_t>& buffer, JpegRegion* out);

}  // namespace pinfeed::data
