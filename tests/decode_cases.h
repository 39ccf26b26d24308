// A folder of every kind of file the decode paths must agree on (unusual valid files, corrupt files, smooth photos
// of several sizes), built in memory as an ImageFolder, and the pixels each path gives a sample.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "data/dataset/dataset.h"
#include "image_cases.h"
#include "test_util.h"

namespace pinfeed::test {

// Smooth colour gradients and discs: natural-image-like content on which two resamplers agree closely (noise
// would turn every sub-pixel difference into a large one).
inline cv::Mat smooth_image(int w, int h, int seed) {
  cv::Mat m(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      m.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<uint8_t>(255 * x / w), static_cast<uint8_t>(255 * y / h),
                                        static_cast<uint8_t>((seed * 40 + 128 * (x + y) / (w + h)) % 256));
    }
  }
  for (int i = 0; i < 6; ++i) {
    const cv::Point c((seed * 97 + i * 131) % w, (seed * 53 + i * 71) % h);
    cv::circle(m, c, std::max(4, std::min(w, h) / (4 + i)), cv::Scalar(40 * i, 255 - 30 * i, 90 + 20 * i), cv::FILLED,
               cv::LINE_AA);
  }
  cv::GaussianBlur(m, m, cv::Size(5, 5), 1.5);
  return m;
}

struct NamedFile {
  std::string name;
  Bytes bytes;
  bool bad = false;
};

// Valid files of every kind the GPU path sorts (hardware, hybrid, CPU), at sizes that make the crop's DCT scale
// 1, 2, 4 and 8 likely; plus, with `corrupt`, the corrupt files libjpeg flags.
inline std::vector<NamedFile> decode_cases(bool corrupt) {
  std::vector<NamedFile> files;
  int seed = 0;
  for (const cv::Size size : {cv::Size(500, 375), cv::Size(1600, 1200), cv::Size(333, 500), cv::Size(120, 90)}) {
    const cv::Mat img = smooth_image(size.width, size.height, ++seed);
    cv::Mat gray;
    cv::cvtColor(img, gray, cv::COLOR_BGR2GRAY);
    const std::string tag = std::to_string(size.width) + "x" + std::to_string(size.height);
    files.push_back({"baseline_420_" + tag, encode(img, ".jpg", {cv::IMWRITE_JPEG_QUALITY, 95})});
    files.push_back({"progressive_" + tag, encode(img, ".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1})});
    files.push_back({"grayscale_" + tag, encode(gray, ".jpg")});
    files.push_back({"sampling_444_" + tag, encode_libjpeg(img, Libjpeg::k444)});
    files.push_back({"sampling_422_" + tag, encode_libjpeg(img, Libjpeg::k422)});
    files.push_back({"sampling_440_" + tag, encode_libjpeg(img, Libjpeg::k440)});
    files.push_back({"restart_markers_" + tag, encode(img, ".jpg", {cv::IMWRITE_JPEG_RST_INTERVAL, 4})});
  }
  const cv::Mat img = smooth_image(200, 150, 9);
  files.push_back({"cmyk", encode_libjpeg(img, Libjpeg::kCmyk)});
  files.push_back({"png", encode(img, ".png")});
  files.push_back({"exif_orientation", with_exif(encode(img, ".jpg"))});
  if (corrupt) {
    for (const Case& c : corrupt_files()) files.push_back({"corrupt_" + c.name, c.bytes, true});
  }
  return files;
}

// The files written under a fresh folder, as one class of an ImageFolder, in the given order.
inline data::ImageFolder write_folder(const std::string& name, const std::vector<NamedFile>& files) {
  data::ImageFolder folder;
  folder.root = fresh_dir(name);
  folder.classes = {"a", "b"};
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string path = folder.root + "/" + std::to_string(i) + "_" + files[i].name + ".jpg";
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(files[i].bytes.data()), static_cast<std::streamsize>(files[i].bytes.size()));
    folder.samples.push_back({path, static_cast<int64_t>(i % 2)});
  }
  return folder;
}

}  // namespace pinfeed::test
