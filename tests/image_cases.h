// Image files for tests of bad and unusual input: corrupt JPEGs of every kind libjpeg flags, and unusual but valid
// files (progressive, grayscale, 4:4:4, CMYK, EXIF, PNG). Shared by the CPU and GPU decode tests.
#pragma once

#include <gtest/gtest.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "test_util.h"

namespace pinfeed::test {

using Bytes = std::vector<uint8_t>;

// What libjpeg can write and OpenCV 4.6 cannot.
enum class Libjpeg {
  k444,           // YCbCr 4:4:4, baseline
  k422,           // YCbCr 4:2:2 (luma 2x1 over chroma 1x1), baseline
  k440,           // YCbCr 4:4:0 (luma 1x2 over chroma 1x1), baseline
  kCmyk,          // CMYK (Adobe marker)
  kRgb,           // RGB stored as is (Adobe marker, transform 0)
  kMultiScan,     // baseline, one scan per component (non-interleaved)
  kExtended,      // extended sequential (SOF1): quantisation tables over 255, at quality 5
  // Progressive with 4x vertical luma sampling: luma 2x4 over chroma 1x1, and luma 1x4 over chroma 1x2. Valid
  // files that libjpeg-turbo 2.1.5's jpeg_skip_scanlines loops on for ever.
  kProgressiveH2V4,
  kProgressiveH1V4,
};

inline Bytes encode_libjpeg(const cv::Mat& bgr, Libjpeg kind) {
  const bool cmyk = kind == Libjpeg::kCmyk;
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &out, &size);
  cinfo.image_width = bgr.cols;
  cinfo.image_height = bgr.rows;
  cinfo.input_components = cmyk ? 4 : 3;
  cinfo.in_color_space = cmyk ? JCS_CMYK : JCS_EXT_BGR;
  jpeg_set_defaults(&cinfo);  // CMYK in, CMYK (Adobe) out; else YCbCr
  jpeg_set_quality(&cinfo, kind == Libjpeg::kExtended ? 5 : 90, /*force_baseline=*/kind != Libjpeg::kExtended);
  if (kind == Libjpeg::kRgb) jpeg_set_colorspace(&cinfo, JCS_RGB);
  if (!cmyk) cinfo.comp_info[0].h_samp_factor = cinfo.comp_info[0].v_samp_factor = 1;  // 4:4:4
  if (kind == Libjpeg::k422) cinfo.comp_info[0].h_samp_factor = 2;
  if (kind == Libjpeg::k440) cinfo.comp_info[0].v_samp_factor = 2;
  if (kind == Libjpeg::kProgressiveH2V4 || kind == Libjpeg::kProgressiveH1V4) {
    const bool h2 = kind == Libjpeg::kProgressiveH2V4;
    cinfo.comp_info[0].h_samp_factor = h2 ? 2 : 1;
    cinfo.comp_info[0].v_samp_factor = 4;
    for (int c = 1; c < 3; ++c) {
      cinfo.comp_info[c].h_samp_factor = 1;
      cinfo.comp_info[c].v_samp_factor = h2 ? 1 : 2;
    }
    jpeg_simple_progression(&cinfo);
  }
  jpeg_scan_info scans[3];
  if (kind == Libjpeg::kMultiScan) {
    for (int c = 0; c < 3; ++c) scans[c] = {1, {c, 0, 0, 0}, 0, 63, 0, 0};
    cinfo.scan_info = scans;
    cinfo.num_scans = 3;
  }
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(bgr.cols) * cinfo.input_components);
  for (int y = 0; y < bgr.rows; ++y) {
    for (int x = 0; x < bgr.cols; ++x) {
      const cv::Vec3b px = bgr.at<cv::Vec3b>(y, x);
      for (int c = 0; c < cinfo.input_components; ++c) row[x * cinfo.input_components + c] = c < 3 ? px[c] : 40;
    }
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  Bytes bytes(out, out + size);
  std::free(out);
  return bytes;
}

// Offset of the first byte of entropy-coded data (after the first SOS segment).
inline size_t entropy_start(const Bytes& jpg) {
  for (size_t i = 2; i + 3 < jpg.size(); ++i) {
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xDA) return i + 2 + ((jpg[i + 2] << 8) | jpg[i + 3]);
  }
  ADD_FAILURE() << "no SOS marker";
  return 0;
}

// XORs `count` entropy bytes from `at` on, leaving 0xFF bytes and the byte after each alone and never making a
// new 0xFF, so the damage is to the Huffman data only, not to the marker structure.
inline Bytes damage_entropy(Bytes jpg, size_t at, size_t count, uint8_t mask) {
  for (size_t i = at; count > 0 && i + 2 < jpg.size(); ++i) {
    if (jpg[i] == 0xFF || jpg[i - 1] == 0xFF || (jpg[i] ^ mask) == 0xFF) continue;
    jpg[i] ^= mask;
    --count;
  }
  return jpg;
}

// Portrait and high-entropy, so the entropy data is spread evenly over the rows and the bottom tenth of it lies
// well below the val crop (rows 144..368 of 512) and below most train crops.
inline const Bytes& base_jpeg() {
  static const Bytes jpg = encode(noise_image(256, 512), ".jpg", {cv::IMWRITE_JPEG_QUALITY, 90});
  return jpg;
}

struct Case {
  std::string name;
  Bytes bytes;
};

inline std::vector<Case> corrupt_files() {
  const Bytes& good = base_jpeg();
  const size_t start = entropy_start(good), end = good.size() - 2;  // end: the EOI marker
  std::vector<Case> cases;
  {  // cut short, then the end-of-image marker put back: libjpeg pads the rest with grey silently
    Bytes b(good.begin(), good.begin() + start + (end - start) * 6 / 10);
    b.push_back(0xFF);
    b.push_back(0xD9);
    cases.push_back({"truncated_with_eoi", b});
  }
  {  // cut short in the last rows, below any val crop, EOI put back
    Bytes b(good.begin(), good.begin() + start + (end - start) * 97 / 100);
    b.push_back(0xFF);
    b.push_back(0xD9);
    cases.push_back({"truncated_near_the_end_with_eoi", b});
  }
  cases.push_back({"truncated_without_eoi", Bytes(good.begin(), good.begin() + (start + end) / 2)});
  cases.push_back({"entropy_damaged_below_the_crop", damage_entropy(good, start + (end - start) * 9 / 10, 8, 0x5A)});
  cases.push_back({"garbage_after_sos", damage_entropy(good, start, 200, 0xA7)});
  cases.push_back({"zero_bytes", Bytes{}});
  cases.push_back({"not_an_image", Bytes{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'}});
  return cases;
}

// APP1 "Exif" with one IFD entry, orientation = 6 (rotate 90), inserted right after SOI.
inline Bytes with_exif(Bytes jpg) {
  const Bytes tiff = {'M', 'M', 0, 42, 0, 0, 0, 8,                 // big-endian TIFF header, IFD at 8
                      0, 1,                                        // one entry
                      0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0,    // Orientation, SHORT, 1, value 6
                      0, 0, 0, 0};                                 // no next IFD
  Bytes app1 = {0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  app1.insert(app1.end(), tiff.begin(), tiff.end());
  const size_t len = app1.size() - 2;
  app1[2] = static_cast<uint8_t>(len >> 8);
  app1[3] = static_cast<uint8_t>(len & 0xFF);
  jpg.insert(jpg.begin() + 2, app1.begin(), app1.end());
  return jpg;
}

inline std::vector<Case> unusual_valid_files() {
  const cv::Mat img = noise_image(200, 150);
  cv::Mat gray;
  cv::cvtColor(img, gray, cv::COLOR_BGR2GRAY);
  Bytes trailing = encode(img, ".jpg");
  trailing.insert(trailing.end(), 3000, 0x00);  // some writers append data after EOI; more than the old 1 KB window
  return {
      {"baseline_420", encode(img, ".jpg")},
      {"progressive", encode(img, ".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1})},
      {"grayscale", encode(gray, ".jpg")},
      {"restart_markers", encode(img, ".jpg", {cv::IMWRITE_JPEG_RST_INTERVAL, 4})},
      {"sampling_444", encode_libjpeg(img, Libjpeg::k444)},
      {"progressive_h2v4", encode_libjpeg(img, Libjpeg::kProgressiveH2V4)},
      {"progressive_h1v4", encode_libjpeg(img, Libjpeg::kProgressiveH1V4)},
      {"cmyk", encode_libjpeg(img, Libjpeg::kCmyk)},
      {"exif_orientation", with_exif(encode(img, ".jpg"))},
      {"bytes_after_eoi", trailing},
      {"png", encode(img, ".png")},
      {"grayscale_png", encode(gray, ".png")},
  };
}

}  // namespace pinfeed::test
