#include "data/jpeg/jpeg_header.h"

#include <cstring>

namespace pinfeed::data {
namespace {
uint32_t be16(const uint8_t* p) { return (uint32_t(p[0]) << 8) | p[1]; }

// libjpeg-turbo's default_decompress_parms for 3 components: a JFIF marker means YCbCr; else an Adobe marker's
// transform decides (0: RGB); else the component IDs 'R', 'G', 'B' mean RGB; anything else is YCbCr.
bool stored_as_rgb(bool jfif, int adobe_transform, const uint8_t ids[3]) {
  if (jfif) return false;
  if (adobe_transform >= 0) return adobe_transform == 0;
  return ids[0] == 'R' && ids[1] == 'G' && ids[2] == 'B';
}

// Start-of-scan markers from `i` on (just after the first scan's header): entropy data holds no marker but
// stuffed 0xFF00 and restart markers, so every other 0xFF xx there is a marker.
int count_scans_from(const uint8_t* d, size_t n, size_t i) {
  int scans = 1;
  while (i + 1 < n) {
    const void* hit = std::memchr(d + i, 0xFF, n - i - 1);
    if (!hit) break;
    i = static_cast<size_t>(static_cast<const uint8_t*>(hit) - d);
    const uint8_t marker = d[i + 1];
    if (marker == 0xDA) ++scans;
    if (marker == 0xD9) break;
    i += 2;
  }
  return scans;
}
}  // namespace

bool parse_jpeg_info(const uint8_t* d, size_t n, JpegInfo* out, bool count_scans) {
  *out = JpegInfo{};
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return false;
  bool jfif = false, frame = false;
  int adobe_transform = -1;
  uint8_t ids[3] = {};
  size_t i = 2;
  while (i + 4 <= n) {
    if (d[i] != 0xFF) break;
    const uint8_t marker = d[i + 1];
    if (marker == 0xFF) { ++i; continue; }  // fill byte
    if (marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) { i += 2; continue; }
    const size_t length = be16(d + i + 2);
    if (length < 2 || i + 2 + length > n) break;
    const uint8_t* seg = d + i + 4;  // the segment's payload
    const size_t len = length - 2;
    if (marker == 0xE0 && len >= 5 && std::memcmp(seg, "JFIF", 5) == 0) jfif = true;
    if (marker == 0xEE && len >= 12 && std::memcmp(seg, "Adobe", 5) == 0) adobe_transform = seg[11];
    const bool sof = marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof && !frame) {
      if (len < 6) return false;
      out->sof = marker;
      out->precision = seg[0];
      out->height = static_cast<int>(be16(seg + 1));
      out->width = static_cast<int>(be16(seg + 3));
      out->components = seg[5];
      if (out->width <= 0 || out->height <= 0 || out->components <= 0) return false;
      if (len < 6 + 3 * static_cast<size_t>(out->components)) return false;
      for (int c = 0; c < out->components && c < 4; ++c) {
        out->sampling[c] = seg[6 + 3 * c + 1];
        if (c < 3) ids[c] = seg[6 + 3 * c];
      }
      frame = true;
    }
    if (marker == 0xDA) {  // the first scan: what follows is entropy data
      if (count_scans) out->scans = count_scans_from(d, n, i + 2 + length);
      break;
    }
    i += 2 + length;
  }
  if (!frame) return false;
  out->rgb = out->components == 3 && stored_as_rgb(jfif, adobe_transform, ids);
  out->cmyk = out->components == 4;
  return true;
}

JpegRoute gpu_decode_for(const JpegInfo& info, int64_t max_gpu_pixels) {
  if (info.precision != 8 || info.rgb || info.cmyk) return JpegRoute::kCpu;
  if (info.components != 1 && info.components != 3) return JpegRoute::kCpu;
  if (max_gpu_pixels > 0 && int64_t{info.width} * info.height > max_gpu_pixels) return JpegRoute::kCpu;
  if (info.sof != 0xC0 && info.sof != 0xC1 && info.sof != 0xC2) return JpegRoute::kCpu;  // arithmetic, lossless
  if (info.sof != 0xC0 || info.scans != 1) return JpegRoute::kHybrid;
  if (info.components == 1) return JpegRoute::kHardware;
  const uint8_t luma = info.sampling[0];
  const bool chroma_full = info.sampling[1] == 0x11 && info.sampling[2] == 0x11;
  const bool engine_subsampling = luma == 0x11 || luma == 0x21 || luma == 0x22 || luma == 0x12;
  return chroma_full && engine_subsampling ? JpegRoute::kHardware : JpegRoute::kHybrid;
}

}  // namespace pinfeed::data
