// Decodes only the part of a JPEG a crop needs, with libjpeg-turbo: rows above the crop are skipped without
// IDCT (jpeg_skip_scanlines), columns outside it skip IDCT and colour conversion (jpeg_crop_scanline), and a DCT
// scale of 1/2, 1/4 or 1/8 shrinks a large crop for free. Rows below the crop are entropy-decoded but not
// IDCT'd, so that damage anywhere in the file is seen (see check_jpeg in jpeg_check.h: the same policy).
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
// grows, so a warm worker allocates nothing per image. Throws std::runtime_error when the file is bad: a libjpeg
// error, any libjpeg warning anywhere in the file (corrupt data), or a header over max_pixels (0: no limit),
// refused before anything is allocated. Returns false, having decoded nothing, for the colour spaces this
// path does not convert (CMYK, YCCK): the caller falls back to a full decode.
bool decode_jpeg_region(const uint8_t* data, size_t size, const cv::Rect& box, int scale_denom, int64_t max_pixels,
                        std::vector<uint8_t>& buffer, JpegRegion* out);

}  // namespace pinfeed::data
