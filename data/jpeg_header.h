// What a JPEG's header says about how it can be decoded, read without libjpeg: which GPU decoder (if any) takes
// the file when data.decoder = "nvjpeg".
#pragma once

#include <cstddef>
#include <cstdint>

namespace pinfeed::data {

struct JpegInfo {
  int width = 0, height = 0;
  uint8_t sof = 0;     // frame marker: 0xC0 baseline, 0xC1 extended sequential, 0xC2 progressive, ...
  int precision = 0;   // bits per sample
  int components = 0;
  uint8_t sampling[4] = {};  // per component: horizontal factor << 4 | vertical factor
  bool adobe_untransformed = false;  // APP14 "Adobe" marker with transform 0: RGB or CMYK stored as is
};

// Reads the markers up to the frame header (SOFn); false if the data is not a JPEG or ends before one.
bool parse_jpeg_info(const uint8_t* data, size_t size, JpegInfo* out);

// Where a JPEG is decoded when the GPU decodes (data.decoder = "nvjpeg").
enum class GpuDecode : uint8_t {
  kNone,      // on the CPU: CMYK, Adobe RGB, arithmetic coding, lossless, 12-bit, or over max_gpu_pixels
  kHardware,  // nvJPEG's hardware engines, batched: baseline/extended Huffman, 8-bit, gray or 3 components
              // sampled 4:4:4, 4:2:2, 4:2:0 or 4:4:0 (the subsamplings the engines take)
  kHybrid,    // nvJPEG's hybrid decoder one at a time (Huffman on the CPU, the rest on the GPU): progressive,
              // or sequential with other subsamplings (4:1:1, 4:1:0)
};

GpuDecode gpu_decode_for(const JpegInfo& info, int64_t max_gpu_pixels);

}  // namespace pinfeed::data
