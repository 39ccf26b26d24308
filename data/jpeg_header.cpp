#include "data/jpeg_header.h"

#include <cstring>

namespace pinfeed::data {
namespace {
uint32_t be16(const uint8_t* p) { return (uint32_t(p[0]) << 8) | p[1]; }
}  // namespace

bool parse_jpeg_info(const uint8_t* d, size_t n, JpegInfo* out) {
  *out = JpegInfo{};
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return false;
  size_t i = 2;
  while (i + 4 <= n) {
    if (d[i] != 0xFF) return false;
    const uint8_t marker = d[i + 1];
    if (marker == 0xFF) { ++i; continue; }  // fill byte
    if (marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) { i += 2; continue; }
    const size_t length = be16(d + i + 2);
    if (length < 2 || i + 2 + length > n) return false;
    const uint8_t* seg = d + i + 4;  // the segment's payload
    const size_t len = length - 2;
    if (marker == 0xEE && len >= 12 && std::memcmp(seg, "Adobe", 5) == 0) out->adobe_untransformed = seg[11] == 0;
    const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof) {
      if (len < 6) return false;
      out->sof = marker;
      out->precision = seg[0];
      out->height = static_cast<int>(be16(seg + 1));
      out->width = static_cast<int>(be16(seg + 3));
      out->components = seg[5];
      if (len < 6 + 3 * static_cast<size_t>(out->components)) return false;
      for (int c = 0; c < out->components && c < 4; ++c) out->sampling[c] = seg[6 + 3 * c + 1];
      return out->width > 0 && out->height > 0 && out->components > 0;
    }
    i += 2 + length;
  }
  return false;
}

GpuDecode gpu_decode_for(const JpegInfo& info, int64_t max_gpu_pixels) {
  if (info.precision != 8 || info.adobe_untransformed) return GpuDecode::kNone;
  if (info.components != 1 && info.components != 3) return GpuDecode::kNone;  // CMYK/YCCK: CPU
  if (max_gpu_pixels > 0 && int64_t{info.width} * info.height > max_gpu_pixels) return GpuDecode::kNone;
  const bool huffman_sequential = info.sof == 0xC0 || info.sof == 0xC1;
  if (!huffman_sequential && info.sof != 0xC2) return GpuDecode::kNone;  // arithmetic, lossless, hierarchical
  if (info.sof == 0xC2) return GpuDecode::kHybrid;
  if (info.components == 1) return GpuDecode::kHardware;
  const uint8_t luma = info.sampling[0];
  const bool chroma_full = info.sampling[1] == 0x11 && info.sampling[2] == 0x11;
  const bool engine_subsampling = luma == 0x11 || luma == 0x21 || luma == 0x22 || luma == 0x12;
  return chroma_full && engine_subsampling ? GpuDecode::kHardware : GpuDecode::kHybrid;
}

}  // namespace pinfeed::data
