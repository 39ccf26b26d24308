#include "data/jpeg/jpeg_check.h"

#include <stdexcept>
#include <string>

#include "data/geometry.h"
#include "data/jpeg/jpeg_errors.h"

namespace pinfeed::data {

void jpeg::open_within_limit(jpeg_decompress_struct* cinfo, const uint8_t* data, size_t size, int64_t max_pixels) {
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);  // not a JPEG, no image, corrupt header: error_exit
  // No libjpeg call while the string lives: a longjmp would skip its destructor.
  const std::string too_big = pixel_limit_error(cinfo->image_width, cinfo->image_height, max_pixels);
  if (!too_big.empty()) {
    jpeg_destroy_decompress(cinfo);
    throw std::runtime_error(too_big);
  }
}

void check_jpeg(const uint8_t* data, size_t size, int64_t max_pixels, std::vector<uint8_t>& buffer) {
  jpeg::read_checked(data, size, max_pixels, [&](jpeg_decompress_struct* cinfo) {
    cinfo->scale_num = 1;
    cinfo->scale_denom = 8;  // DC-only IDCT: the output is thrown away, only the entropy decode matters
    cinfo->do_fancy_upsampling = FALSE;
    jpeg_start_decompress(cinfo);  // multi-scan files (progressive) are entropy-decoded whole here
    const size_t stride = static_cast<size_t>(cinfo->output_width) * cinfo->output_components;
    if (buffer.size() < stride) buffer.resize(stride);
    // A skip entropy-decodes the rows it passes, but one to the very bottom reads nothing: stop one row short.
    JSAMPROW row = buffer.data();
    jpeg::skip_rows(cinfo, cinfo->output_height - 1, row);
    jpeg_read_scanlines(cinfo, &row, 1);
    return true;
  });
}

}  // namespace pinfeed::data
