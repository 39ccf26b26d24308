#include "data/jpeg/jpeg_region.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "data/geometry.h"
#include "data/jpeg/jpeg_errors.h"

namespace pinfeed::data {

bool decode_jpeg_region(const uint8_t* data, size_t size, const cv::Rect& box, int scale_denom, int64_t max_pixels,
                        std::vector<uint8_t>& buffer, JpegRegion* out) {
  jpeg_decompress_struct cinfo;
  jpeg::ErrorManager err;
  jpeg::install(&cinfo, &err);
  // Nothing below this point owns C++ objects with destructors, so longjmp out of libjpeg is safe.
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw std::runtime_error(std::string("libjpeg: ") + err.error);
  }
  jpeg::open_within_limit(&cinfo, data, size, max_pixels);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  cinfo.out_color_space = JCS_EXT_BGR;  // what OpenCV would give, so both paths feed the same code
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned>(scale_denom);
  jpeg_start_decompress(&cinfo);  // multi-scan files (progressive) are entropy-decoded whole here

  const CropBox scaled = scaled_crop({box.x, box.y, box.width, box.height}, static_cast<int>(cinfo.output_width),
                                     static_cast<int>(cinfo.output_height), scale_denom);
  const int x0 = scaled.x, y0 = scaled.y, w = scaled.w, h = scaled.h;
  JDIMENSION xoffset = static_cast<JDIMENSION>(x0), width = static_cast<JDIMENSION>(w);
  jpeg_crop_scanline(&cinfo, &xoffset, &width);  // widens to iMCU boundaries

  const int region_w = static_cast<int>(cinfo.output_width);  // now the cropped width
  const size_t stride = static_cast<size_t>(region_w) * 3;
  if (buffer.size() < stride * (h + 1)) buffer.resize(stride * (h + 1));  // + 1: the last image row, below
  JSAMPROW spare = buffer.data() + stride * h;
  jpeg::skip_rows(&cinfo, static_cast<JDIMENSION>(y0), spare);
  while (cinfo.output_scanline < static_cast<JDIMENSION>(y0 + h)) {
    JSAMPROW row = buffer.data() + stride * (cinfo.output_scanline - y0);
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  // Damage below the crop must be seen too. Skipping entropy-decodes the rows it passes (no IDCT, upsampling or
  // colour conversion), except a skip to the very bottom, which libjpeg short-cuts without reading anything. So:
  // skip to the last row, read that one, and let finish_decompress read the markers up to end-of-image.
  const JDIMENSION last = cinfo.output_height - 1;
  if (cinfo.output_scanline < last) jpeg::skip_rows(&cinfo, last - cinfo.output_scanline, spare);
  if (cinfo.output_scanline == last) jpeg_read_scanlines(&cinfo, &spare, 1);
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (err.base.num_warnings > 0) throw std::runtime_error(std::string("libjpeg: ") + err.first_warning);

  out->pixels = cv::Mat(h, region_w, CV_8UC3, buffer.data(), stride);
  out->crop = cv::Rect(x0 - static_cast<int>(xoffset), 0, w, h);
  return true;
}

}  // namespace pinfeed::data
