// libjpeg error handling shared by the crop-region decode and the integrity check. Errors longjmp back to the
// caller's setjmp; warnings, libjpeg's word for corrupt data it decoded around (padding a truncated file with
// zeros, resyncing after a bad Huffman code, skipping extraneous bytes), are counted and the first one kept,
// so the caller can refuse the file instead of training on grey or smeared rows.
#pragma once

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <jpeglib.h>
#include <jerror.h>

namespace pinfeed::data::jpeg {

struct ErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char error[JMSG_LENGTH_MAX] = "";          // the fatal error's text, set before the longjmp
  char first_warning[JMSG_LENGTH_MAX] = "";  // the first warning's text; base.num_warnings counts them all
};

extern "C" inline void on_jpeg_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->error);
  std::longjmp(err->jump, 1);
}

// Level -1 is a warning (the default handler counts it in num_warnings too); levels >= 0 are trace output.
// An unknown JFIF revision number is a header curiosity, not damage, so it is not counted.
extern "C" inline void on_jpeg_message(j_common_ptr cinfo, int level) {
  if (level >= 0 || cinfo->err->msg_code == JWRN_JFIF_MAJOR) return;
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  if (err->base.num_warnings++ == 0) (*cinfo->err->format_message)(cinfo, err->first_warning);
}

// Installs the handlers on a decompressor that has not been created yet.
inline void install(jpeg_decompress_struct* cinfo, ErrorManager* err) {
  cinfo->err = jpeg_std_error(&err->base);
  err->base.error_exit = on_jpeg_error;
  err->base.emit_message = on_jpeg_message;
}

// Called after the caller's setjmp: creates the decompressor over `data` and reads the header (libjpeg's errors
// longjmp to the caller), then refuses a header over max_pixels (0: no limit) before anything is allocated for
// pixels: destroys the decompressor and throws std::runtime_error naming the limit. The header's size, not a
// peeked one, is what libjpeg would allocate for. (jpeg_check.cpp)
void open_within_limit(jpeg_decompress_struct* cinfo, const uint8_t* data, size_t size, int64_t max_pixels);

// The one policy of the crop-region decode and the integrity check, so a file is accepted or refused whichever
// path reads it: opens a decompressor over `data` (open_within_limit) with the handlers installed, runs
// `read(cinfo)`, then reads the markers up to end-of-image. Throws std::runtime_error ("libjpeg: ...") on an error
// or any warning. `read` starts the decompression and reads what it needs; libjpeg's errors longjmp out of it, so
// it must own nothing with a destructor. It returns false to give the file up unread: then so does this, throwing
// nothing.
template <typename Read>
bool read_checked(const uint8_t* data, size_t size, int64_t max_pixels, Read&& read) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  install(&cinfo, &err);
  // Nothing below this point owns C++ objects with destructors, so longjmp out of libjpeg is safe.
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw std::runtime_error(std::string("libjpeg: ") + err.error);
  }
  open_within_limit(&cinfo, data, size, max_pixels);
  if (!read(&cinfo)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_finish_decompress(&cinfo);  // reads the markers up to end-of-image
  jpeg_destroy_decompress(&cinfo);
  if (err.base.num_warnings > 0) throw std::runtime_error(std::string("libjpeg: ") + err.first_warning);
  return true;
}

// jpeg_skip_scanlines(cinfo, rows), where libjpeg-turbo's skip is known to terminate; else the rows are decoded
// one by one into `row` (room for one output row) and dropped. With 4x vertical sampling (luma sampled 1x4 or
// 2x4, progressive) libjpeg-turbo 2.1.5's skip loops for ever on some crops, and a corrupted header byte can
// declare such sampling: the skip is used only for sampling factors of 1 and 2, which are what real cameras and
// encoders write (4:4:4, 4:2:2, 4:2:0, 4:4:0). Reading instead of skipping costs the IDCT and colour conversion
// of the rows passed. Call after jpeg_start_decompress; libjpeg's errors longjmp to the caller's setjmp.
inline void skip_rows(jpeg_decompress_struct* cinfo, JDIMENSION rows, JSAMPROW row) {
  if (rows == 0) return;
  if (cinfo->max_v_samp_factor <= 2 && cinfo->max_h_samp_factor <= 2) {
    jpeg_skip_scanlines(cinfo, rows);
    return;
  }
  const JDIMENSION end = cinfo->output_scanline + rows;
  while (cinfo->output_scanline < end) jpeg_read_scanlines(cinfo, &row, 1);
}

}  // namespace pinfeed::data::jpeg
