#include "data/jpeg/jpeg_region.h"

#include "data/geometry.h"
#include "data/jpeg/jpeg_errors.h"

namespace pinfeed::data {

bool decode_jpeg_region(const uint8_t* data, size_t size, const cv::Rect& box, int scale_denom, int64_t max_pixels,
                        std::vector<uint8_t>& buffer, JpegRegion* out) {
  CropBox scaled{};        // the crop at the decode's scale
  JDIMENSION xoffset = 0;  // the first decoded column: the crop's left edge, widened to an iMCU boundary
  int region_w = 0;        // the decoded columns
  size_t stride = 0;
  const bool read = jpeg::read_checked(data, size, max_pixels, [&](jpeg_decompress_struct* cinfo) {
    if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) return false;
    cinfo->out_color_space = JCS_EXT_BGR;  // what OpenCV would give, so both paths feed the same code
    cinfo->scale_num = 1;
    cinfo->scale_denom = static_cast<unsigned>(scale_denom);
    jpeg_start_decompress(cinfo);  // multi-scan files (progressive) are entropy-decoded whole here

    scaled = scaled_crop({box.x, box.y, box.width, box.height}, static_cast<int>(cinfo->output_width),
                         static_cast<int>(cinfo->output_height), scale_denom);
    const int y0 = scaled.y, h = scaled.h;
    xoffset = static_cast<JDIMENSION>(scaled.x);
    JDIMENSION width = static_cast<JDIMENSION>(scaled.w);
    jpeg_crop_scanline(cinfo, &xoffset, &width);  // widens to iMCU boundaries

    region_w = static_cast<int>(cinfo->output_width);  // now the cropped width
    stride = static_cast<size_t>(region_w) * 3;
    if (buffer.size() < stride * (h + 1)) buffer.resize(stride * (h + 1));  // + 1: the last image row, below
    JSAMPROW spare = buffer.data() + stride * h;
    jpeg::skip_rows(cinfo, static_cast<JDIMENSION>(y0), spare);
    while (cinfo->output_scanline < static_cast<JDIMENSION>(y0 + h)) {
      JSAMPROW row = buffer.data() + stride * (cinfo->output_scanline - y0);
      jpeg_read_scanlines(cinfo, &row, 1);
    }
    // Damage below the crop must be seen too. Skipping entropy-decodes the rows it passes (no IDCT, upsampling or
    // colour conversion), except a skip to the very bottom, which libjpeg short-cuts without reading anything. So:
    // skip to the last row, read that one, and let finish_decompress (read_checked) read the markers up to
    // end-of-image.
    const JDIMENSION last = cinfo->output_height - 1;
    if (cinfo->output_scanline < last) jpeg::skip_rows(cinfo, last - cinfo->output_scanline, spare);
    if (cinfo->output_scanline == last) jpeg_read_scanlines(cinfo, &spare, 1);
    return true;
  });
  if (!read) return false;

  out->pixels = cv::Mat(scaled.h, region_w, CV_8UC3, buffer.data(), stride);
  out->crop = cv::Rect(scaled.x - static_cast<int>(xoffset), 0, scaled.w, scaled.h);
  return true;
}

}  // namespace pinfeed::data
