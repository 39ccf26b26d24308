#include "data/jpeg_region.h"

#include <csetjmp>
#include <cstdio>

#include <algorithm>

#include <jpeglib.h>

namespace pinfeed::data {
namespace {

struct ErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
};

extern "C" void on_jpeg_error(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<ErrorManager*>(cinfo->err)->jump, 1);
}
extern "C" void on_jpeg_message(j_common_ptr, int) {}  // warnings: truncation is checked by the caller

}  // namespace

bool decode_jpeg_region(const uint8_t* data, size_t size, const cv::Rect& box, int scale_denom,
                        std::vector<uint8_t>& buffer, JpegRegion* out) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  cinfo.err = jpeg_std_error(&err.base);
  err.base.error_exit = on_jpeg_error;
  err.base.emit_message = on_jpeg_message;
  // Nothing below this point owns C++ objects with destructors, so longjmp out of libjpeg is safe.
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  if (jpeg_read_header(&cinfo, TRUE) != JPEG_HEADER_OK || cinfo.jpeg_color_space == JCS_CMYK ||
      cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  cinfo.out_color_space = JCS_EXT_BGR;  // what OpenCV would give, so both paths feed the same code
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned>(scale_denom);
  jpeg_start_decompress(&cinfo);

  const int W = static_cast<int>(cinfo.output_width), H = static_cast<int>(cinfo.output_height);
  int x0 = std::clamp(box.x / scale_denom, 0, W - 1), y0 = std::clamp(box.y / scale_denom, 0, H - 1);
  const int w = std::clamp(box.width / scale_denom, 1, W - x0), h = std::clamp(box.height / scale_denom, 1, H - y0);
  JDIMENSION xoffset = static_cast<JDIMENSION>(x0), width = static_cast<JDIMENSION>(w);
  jpeg_crop_scanline(&cinfo, &xoffset, &width);  // widens to iMCU boundaries
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y0));

  const size_t stride = static_cast<size_t>(cinfo.output_width) * 3;  // output_width is now the cropped width
  if (buffer.size() < stride * h) buffer.resize(stride * h);
  while (cinfo.output_scanline < static_cast<JDIMENSION>(y0 + h)) {
    JSAMPROW row = buffer.data() + stride * (cinfo.output_scanline - y0);
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_abort_decompress(&cinfo);  // the rows below the crop are never decoded
  jpeg_destroy_decompress(&cinfo);

  out->pixels = cv::Mat(h, static_cast<int>(cinfo.output_width), CV_8UC3, buffer.data(), stride);
  out->crop = cv::Rect(x0 - static_cast<int>(xoffset), 0, w, h);
  return true;
}

}  // namespace pinfeed::data
