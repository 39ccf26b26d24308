// What a JPEG's header says about how it can be decoded, read without libjpeg: its size (the one header parser
// of the data path: peek_image_size uses it too) and which GPU decoder, if any, takes the file when
// data.decoder = "nvjpeg".
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
  bool rgb = false;    // 3 components stored as RGB, not YCbCr, by libjpeg's rule (JFIF, Adobe transform, IDs)
  bool cmyk = false;   // 4 components (CMYK or YCCK)
  int scans = 0;       // start-of-scan markers; counted only when `count_scans` is asked for
};

// Reads the markers up to the first scan (SOS), and with count_scans the whole file's scans too (a pass over
// the entropy data looking for markers, cheap beside a decode). False if the data is not a JPEG or ends before its
// frame header; an unreadable segment after the frame header leaves what was read so far.
bool parse_jpeg_info(const uint8_t* data, size_t size, JpegInfo* out, bool count_scans = false);

// Where a JPEG is decoded when the GPU decodes (data.decoder = "nvjpeg").
enum class JpegRoute : uint8_t {
  kCpu,       // on the CPU: CMYK/YCCK, RGB-coded, arithmetic coding, lossless, 12-bit, or over max_gpu_pixels
  kHardware,  // nvJPEG's hardware engines, batched: baseline (SOF0) with a single scan, 8-bit, grey or YCbCr
              // sampled 4:4:4, 4:2:2, 4:2:0 or 4:4:0 (what nvjpeg.h says the engines take)
  kHybrid,    // nvJPEG's hybrid decoder one at a time (Huffman on the CPU, the rest on the GPU): progressive,
              // extended sequential, multi-scan baseline, other subsamplings (4:1:1, 4:1:0)
};

// info from parse_jpeg_info(..., count_scans = true).
JpegRoute gpu_decode_for(const JpegInfo& info, int64_t max_gpu_pixels);

}  // namespace pinfeed::data
