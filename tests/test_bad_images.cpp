// Hostile and unusual image files: corrupt JPEGs are refused on every decode path, decompression bombs are
// refused before allocation, unusual but valid files are accepted, and the dataset records each bad file once.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset/dataset.h"
#include "data/error.h"
#include "data/jpeg/jpeg_check.h"
#include "data/jpeg/jpeg_region.h"
#include "data/transform/transforms.h"
#include "image_cases.h"
#include "test_util.h"

namespace pinfeed::data {
namespace {

using test::Bytes;
using test::Case;
using test::base_jpeg;
using test::corrupt_files;
using test::unusual_valid_files;



// A JPEG header claiming 30000x30000 in front of a tiny body: ~1 KB that would cost 2.7 GB to decode.
Bytes jpeg_bomb() {
  Bytes b = test::encode(test::noise_image(16, 16), ".jpg");
  for (size_t i = 2; i + 8 < b.size(); ++i) {
    if (b[i] == 0xFF && b[i + 1] == 0xC0) {  // SOF0: FF C0 len(2) precision(1) height(2) width(2)
      b[i + 5] = b[i + 7] = 30000 >> 8;
      b[i + 6] = b[i + 8] = 30000 & 0xFF;
      return b;
    }
  }
  ADD_FAILURE() << "no SOF0";
  return b;
}

struct Path {
  bool crop_decode, train;
  PixelFormat format;
};

std::vector<Path> every_path() {
  std::vector<Path> paths;
  for (bool crop_decode : {true, false}) {
    for (bool train : {true, false}) {
      for (PixelFormat f : {PixelFormat::kFloat32Chw, PixelFormat::kUint8Hwc}) paths.push_back({crop_decode, train, f});
    }
  }
  return paths;
}

std::string describe(const Path& p) {
  return std::string(p.crop_decode ? "crop_decode" : "full decode") + (p.train ? ", train" : ", val") +
         (p.format == PixelFormat::kUint8Hwc ? ", uint8" : ", float32");
}

// Decodes with the given path; returns the error message, or "" when the file was accepted.
std::string try_decode(const Bytes& file, const Path& p, uint64_t seed = 3) {
  TransformOptions o;
  o.size = 32;
  o.crop_decode = p.crop_decode;
  o.format = p.format;
  std::vector<uint8_t> out(bytes_per_image(o.format, o.size));
  DecodeScratch scratch;
  SampleRng rng(seed);
  try {
    decode_into(file.data(), file.size(), p.train, o, rng, scratch, out.data());
    return "";
  } catch (const std::runtime_error& e) {
    return e.what();
  }
}

TEST(BadImages, EveryCorruptFileIsRefusedOnEveryDecodePath) {
  for (const Case& c : corrupt_files()) {
    for (const Path& p : every_path()) {
      for (uint64_t seed = 0; seed < 4; ++seed) {  // several train crops, most of them above the damage
        EXPECT_NE(try_decode(c.bytes, p, seed), "") << c.name << ", " << describe(p) << ", seed " << seed;
      }
    }
  }
}

TEST(BadImages, CorruptJpegIsRefusedWithLibjpegsMessage) {
  Bytes b(base_jpeg().begin(), base_jpeg().begin() + base_jpeg().size() / 2);
  b.push_back(0xFF);
  b.push_back(0xD9);
  for (const Path& p : every_path()) {
    EXPECT_NE(try_decode(b, p).find("libjpeg: Corrupt JPEG data"), std::string::npos) << describe(p);
  }
  b.resize(b.size() - 2);  // no end-of-image marker either
  for (const Path& p : every_path()) {
    EXPECT_NE(try_decode(b, p).find("libjpeg: Premature end of JPEG file"), std::string::npos) << describe(p);
  }
}

TEST(BadImages, DecompressionBombIsRefusedNamingThePixelLimit) {
  const Bytes bomb = jpeg_bomb();
  ASSERT_LT(bomb.size(), 2000u);
  for (const Path& p : every_path()) {
    const std::string error = try_decode(bomb, p);
    EXPECT_NE(error.find("30000x30000"), std::string::npos) << describe(p) << ": " << error;
    EXPECT_NE(error.find("max_image_pixels = 100000000"), std::string::npos) << describe(p) << ": " << error;
  }
}

TEST(BadImages, BombWhoseHeaderThePeekCannotReadIsRefusedByLibjpeg) {
  Bytes bomb = jpeg_bomb();
  bomb.insert(bomb.begin() + 2, {0x00, 0x00, 0x00});  // junk before the first marker: libjpeg skips it, the peek gives up
  int w = 0, h = 0;
  ASSERT_FALSE(peek_image_size(bomb.data(), bomb.size(), &w, &h));
  for (const Path& p : every_path()) {
    EXPECT_NE(try_decode(bomb, p).find("max_image_pixels"), std::string::npos) << describe(p);
  }
  std::vector<uint8_t> buffer;
  EXPECT_THROW(check_jpeg(bomb.data(), bomb.size(), 1000, buffer), std::runtime_error);
}

TEST(BadImages, PngBombIsRefusedBeforeDecoding) {
  Bytes png = test::encode(test::noise_image(16, 16), ".png");
  for (int at : {16, 20}) {  // IHDR width, height: big-endian 30000
    png[at] = 0, png[at + 1] = 0, png[at + 2] = 30000 >> 8, png[at + 3] = 30000 & 0xFF;
  }
  for (const Path& p : every_path()) {
    EXPECT_NE(try_decode(png, p).find("max_image_pixels"), std::string::npos) << describe(p);
  }
}

TEST(BadImages, PixelLimitIsAnOptionAndZeroMeansNone) {
  const Bytes jpg = test::encode(test::noise_image(100, 80), ".jpg");
  TransformOptions o;
  o.size = 16;
  std::vector<float> out(3 * 16 * 16);
  DecodeScratch scratch;
  SampleRng rng(1);
  o.max_image_pixels = 100 * 80 - 1;
  EXPECT_THROW(decode_into(jpg.data(), jpg.size(), true, o, rng, scratch, out.data()), std::runtime_error);
  o.max_image_pixels = 100 * 80;
  EXPECT_NO_THROW(decode_into(jpg.data(), jpg.size(), true, o, rng, scratch, out.data()));
  o.max_image_pixels = 0;
  EXPECT_NO_THROW(decode_into(jpg.data(), jpg.size(), true, o, rng, scratch, out.data()));
}

TEST(BadImages, UnusualValidFilesAreAcceptedOnEveryDecodePath) {
  for (const Case& c : unusual_valid_files()) {
    for (const Path& p : every_path()) {
      for (uint64_t seed = 0; seed < 4; ++seed) {
        EXPECT_EQ(try_decode(c.bytes, p, seed), "") << c.name << ", " << describe(p) << ", seed " << seed;
      }
    }
  }
}

TEST(BadImages, CheckJpegAcceptsValidFilesAndRefusesCorruptOnes) {
  std::vector<uint8_t> buffer;
  for (const Case& c : unusual_valid_files()) {
    if (c.name.find("png") != std::string::npos) continue;
    EXPECT_NO_THROW(check_jpeg(c.bytes.data(), c.bytes.size(), 0, buffer)) << c.name;
  }
  for (const Case& c : corrupt_files()) EXPECT_THROW(check_jpeg(c.bytes.data(), c.bytes.size(), 0, buffer), std::runtime_error) << c.name;
}

// --- the dataset's record of bad files ---

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream(path, std::ios::trunc | std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                                 static_cast<std::streamsize>(bytes.size()));
}

TEST(BadImages, PngNamedJpgIsAcceptedFromDisk) {
  const std::string root = test::make_dataset("png_named_jpg", 1, 2, 1, 32);
  ImageFolder folder = scan_image_folder(root, "train");
  write_file(folder.samples[0].path, test::encode(test::noise_image(40, 30), ".png"));
  TransformOptions o;
  o.size = 16;
  Dataset ds(folder, o, true, BadImagePolicy::kFail);
  test::SampleReader reader(ds);
  EXPECT_EQ(reader.load(0, 0, 0), 0);
  EXPECT_EQ(ds.distinct_bad_images(), 0);
}

TEST(BadImages, SameBadFileLoadedManyTimesIsRecordedOnce) {
  const std::string root = test::make_dataset("bad_once", 1, 3, 1, 32);
  ImageFolder folder = scan_image_folder(root, "train");
  write_file(folder.samples[1].path, jpeg_bomb());
  TransformOptions o;
  o.size = 16;
  Dataset ds(folder, o, true, BadImagePolicy::kSkip);
  test::SampleReader reader(ds);
  int bad_loads = 0;
  for (int64_t epoch = 0; epoch < 5; ++epoch) bad_loads += reader.load(1, 0, epoch);
  EXPECT_EQ(bad_loads, 5);
  EXPECT_EQ(ds.distinct_bad_images(), 1);
  const std::vector<BadImage> taken = ds.take_new_bad_images();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].path, folder.samples[1].path);
  EXPECT_NE(taken[0].reason.find("max_image_pixels"), std::string::npos) << taken[0].reason;
  reader.load(1, 0, 5);
  EXPECT_TRUE(ds.take_new_bad_images().empty());  // already taken, not found anew
  EXPECT_EQ(ds.distinct_bad_images(), 1);
}

// An image replaced after the scan by a FIFO (no writer: a read would wait for ever) or by a huge sparse file
// (read whole, it would cost its size in memory) is refused as a bad image from what fstat says, before any read.
TEST(BadImages, FifoAndOversizedFilesAreRefusedBeforeAnyRead) {
  const std::string root = test::make_dataset("not_regular", 1, 3, 1, 32);
  ImageFolder folder = scan_image_folder(root, "train");
  ASSERT_EQ(std::remove(folder.samples[0].path.c_str()), 0);
  ASSERT_EQ(::mkfifo(folder.samples[0].path.c_str(), 0600), 0);
  {
    std::ofstream huge(folder.samples[1].path, std::ios::trunc | std::ios::binary);
  }
  ASSERT_EQ(::truncate(folder.samples[1].path.c_str(), (int64_t{300} << 20)), 0);  // sparse: no disk used
  TransformOptions o;
  o.size = 16;
  Dataset ds(folder, o, true, BadImagePolicy::kSkip);
  test::SampleReader reader(ds);
  EXPECT_GE(reader.load(0, 0, 0), 1);  // bad loads, replacements that met the other bad file included
  EXPECT_GE(reader.load(1, 0, 0), 1);
  std::map<std::string, std::string> reasons;
  for (const BadImage& b : ds.take_new_bad_images()) reasons[b.path] = b.reason;
  EXPECT_EQ(reasons[folder.samples[0].path], "not a regular file (a FIFO)");
  EXPECT_NE(reasons[folder.samples[1].path].find("over the limit of 268435456 (data.max_file_mb)"), std::string::npos)
      << reasons[folder.samples[1].path];
}

TEST(BadImages, BadReplacementsAreRecordedOnceEach) {
  const std::string root = test::make_dataset("bad_replacements", 1, 4, 1, 32);
  ImageFolder folder = scan_image_folder(root, "train");
  const std::vector<Case> corrupt = corrupt_files();
  std::set<std::string> bad_paths;
  for (int i = 0; i < 3; ++i) {  // only sample 3 is good: replacements are often bad too
    write_file(folder.samples[i].path, corrupt[i].bytes);
    bad_paths.insert(folder.samples[i].path);
  }
  TransformOptions o;
  o.size = 16;
  Dataset ds(folder, o, true, BadImagePolicy::kSkip);
  test::SampleReader reader(ds);
  int bad_loads = 0, most_in_one_load = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    for (int64_t i = 0; i < 4; ++i) {
      const int replaced = reader.load(i, seed, 0);
      bad_loads += replaced;
      most_in_one_load = std::max(most_in_one_load, replaced);
      EXPECT_EQ(reader.label, 0);
    }
  }
  EXPECT_GE(most_in_one_load, 2);  // some replacement was bad too
  EXPECT_GT(bad_loads, 3);
  EXPECT_EQ(ds.distinct_bad_images(), 3);
  std::set<std::string> taken_paths;
  for (const BadImage& b : ds.take_new_bad_images()) {
    EXPECT_TRUE(taken_paths.insert(b.path).second) << "taken twice: " << b.path;
    EXPECT_FALSE(b.reason.empty());
  }
  EXPECT_EQ(taken_paths, bad_paths);
}

TEST(BadImages, FailPolicyNamesTheFileAndTheReason) {
  const std::string root = test::make_dataset("bad_fail_reason", 1, 3, 1, 32);
  ImageFolder folder = scan_image_folder(root, "train");
  write_file(folder.samples[0].path, corrupt_files()[0].bytes);  // truncated, end-of-image marker put back
  write_file(folder.samples[1].path, Bytes{'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g'});
  TransformOptions o;
  o.size = 16;
  Dataset ds(folder, o, true, BadImagePolicy::kFail);
  test::SampleReader reader(ds);
  const std::string corrupt = test::message_of<DataError>([&] { reader.load(0, 0, 0); });
  EXPECT_NE(corrupt.find(folder.samples[0].path), std::string::npos) << corrupt;
  EXPECT_NE(corrupt.find("libjpeg: Corrupt JPEG data"), std::string::npos) << corrupt;
  const std::string not_jpeg = test::message_of<DataError>([&] { reader.load(1, 0, 0); });
  EXPECT_NE(not_jpeg.find(folder.samples[1].path), std::string::npos) << not_jpeg;
  EXPECT_EQ(ds.distinct_bad_images(), 2);  // recorded under fail too, for the run folder's list
}

// Progressive files with 4x vertical luma sampling made libjpeg-turbo 2.1.5's jpeg_skip_scanlines loop for ever
// on some crops. Every crop row and height must decode, and give the rows a full decode gives.
TEST(BadImages, ProgressiveFourTimesVerticalSamplingDecodesEveryCrop) {
  const cv::Mat img = test::noise_image(120, 96);
  for (const auto kind : {test::Libjpeg::kProgressiveH2V4, test::Libjpeg::kProgressiveH1V4}) {
    const Bytes jpg = test::encode_libjpeg(img, kind);
    std::vector<uint8_t> full_buffer, buffer;
    JpegRegion full;
    ASSERT_TRUE(decode_jpeg_region(jpg.data(), jpg.size(), cv::Rect(0, 0, img.cols, img.rows), 1, 0, full_buffer, &full));
    for (int y = 0; y < img.rows; y += 3) {
      for (const int h : {1, 7, 33}) {
        if (y + h > img.rows) continue;
        const cv::Rect box(17, y, 50, h);
        JpegRegion part;
        ASSERT_TRUE(decode_jpeg_region(jpg.data(), jpg.size(), box, 1, 0, buffer, &part));
        const cv::Mat got = part.pixels(part.crop), want = full.pixels(box);
        EXPECT_EQ(cv::norm(got, want, cv::NORM_INF), 0) << "rows " << y << "+" << h;
      }
    }
  }
}

// --- PNG through libpng with pinfeed's handlers ---

TEST(BadImages, PngsOfEveryKindDecodeToOpenCVsPixels) {
  const cv::Mat bgr = test::noise_image(37, 23);
  cv::Mat gray, bgra, wide, wide_bgra, bilevel;
  cv::cvtColor(bgr, gray, cv::COLOR_BGR2GRAY);
  cv::cvtColor(bgr, bgra, cv::COLOR_BGR2BGRA);
  for (int y = 0; y < bgra.rows; ++y) bgra.at<cv::Vec4b>(y, 0)[3] = 7;  // some transparency, stripped as OpenCV does
  bgr.convertTo(wide, CV_16U, 257.0, 3);
  bgra.convertTo(wide_bgra, CV_16U, 257.0);
  cv::threshold(gray, bilevel, 127, 255, cv::THRESH_BINARY);
  const std::pair<const char*, Bytes> files[] = {
      {"rgb", test::encode(bgr, ".png")},
      {"gray", test::encode(gray, ".png")},
      {"rgba", test::encode(bgra, ".png")},
      {"rgb16", test::encode(wide, ".png")},
      {"rgba16", test::encode(wide_bgra, ".png")},
      {"bilevel", test::encode(bilevel, ".png", {cv::IMWRITE_PNG_BILEVEL, 1})},
  };
  for (const auto& [name, bytes] : files) {
    const cv::Mat expected = cv::imdecode(bytes, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
    cv::Mat got;
    decode_png(bytes.data(), bytes.size(), got);
    ASSERT_EQ(got.size(), expected.size()) << name;
    ASSERT_EQ(got.type(), expected.type()) << name;
    EXPECT_EQ(cv::norm(got, expected, cv::NORM_INF), 0) << name;
  }
}

TEST(BadImages, CorruptPngIsRefusedWithLibpngsMessageAndNothingPrinted) {
  const Bytes good = test::encode(test::noise_image(40, 30), ".png");
  Bytes flipped = good;  // a byte of the image data changed: a CRC or zlib error, whichever libpng meets first
  for (size_t i = 8; i + 8 < flipped.size(); ++i) {
    if (std::memcmp(&flipped[i], "IDAT", 4) == 0) {
      flipped[i + 10] ^= 0x55;
      break;
    }
  }
  const Bytes truncated(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2));
  for (const Path& p : every_path()) {
    testing::internal::CaptureStderr();
    const std::string crc = try_decode(flipped, p);
    const std::string cut = try_decode(truncated, p);
    const std::string printed = testing::internal::GetCapturedStderr();
    EXPECT_EQ(crc.rfind("libpng: ", 0), 0u) << crc;
    EXPECT_EQ(cut.rfind("libpng: ", 0), 0u) << cut;
    EXPECT_EQ(printed, "") << describe(p);
  }
}

}  // namespace
}  // namespace pinfeed::data
