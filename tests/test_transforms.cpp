#include <gtest/gtest.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <fstream>

#include "data/dataset/dataset.h"
#include "data/jpeg/jpeg_region.h"
#include "data/transform/transforms.h"
#include "test_util.h"

namespace pinfeed::data {
namespace {



TEST(Transforms, TrainCropStaysInsideTheImageAndInRange) {
  TransformOptions o;
  for (uint64_t i = 0; i < 500; ++i) {
    SampleRng rng(stream_seed(1, 0, i));
    const CropBox b = sample_train_crop(500, 375, o, rng);
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.w, 500);
    ASSERT_LE(b.y + b.h, 375);
    const double area = double(b.w) * b.h / (500.0 * 375.0);
    ASSERT_GE(area, 0.07);
    ASSERT_LE(area, 1.0);
  }
}

TEST(Transforms, ValCropIsCentredWithTheResizeRatio) {
  TransformOptions o;
  o.size = 224;
  const CropBox b = val_crop(512, 512, o);  // resize 512 -> 256, crop 224 -> 448 source pixels
  EXPECT_EQ(b.w, 448);
  EXPECT_EQ(b.h, 448);
  EXPECT_EQ(b.x, 32);
  EXPECT_EQ(b.y, 32);
}

TEST(Transforms, HeaderSizeIsReadWithoutDecoding) {
  int w = 0, h = 0;
  const auto jpg = test::encode(test::noise_image(123, 45), ".jpg");
  ASSERT_TRUE(peek_image_size(jpg.data(), jpg.size(), &w, &h));
  EXPECT_EQ(w, 123);
  EXPECT_EQ(h, 45);
  const auto png = test::encode(test::noise_image(31, 17), ".png");
  ASSERT_TRUE(peek_image_size(png.data(), png.size(), &w, &h));
  EXPECT_EQ(w, 31);
  EXPECT_EQ(h, 17);
}

std::vector<float> decode(const std::vector<uint8_t>& file, uint64_t seed, TransformOptions o, bool train = true) {
  std::vector<float> out(3 * o.size * o.size);
  DecodeScratch scratch;
  SampleRng rng(seed);
  decode_into(file.data(), file.size(), train, o, rng, scratch, out.data());
  return out;
}

TEST(Transforms, OutputIsDeterministicPerSeedAndVariesAcrossSeeds) {
  const auto jpg = test::encode(test::noise_image(200, 150), ".jpg");
  TransformOptions o;
  o.size = 32;
  EXPECT_EQ(decode(jpg, stream_seed(7, 3, 11), o), decode(jpg, stream_seed(7, 3, 11), o));
  EXPECT_NE(decode(jpg, stream_seed(7, 3, 11), o), decode(jpg, stream_seed(7, 4, 11), o));  // another epoch
  EXPECT_NE(decode(jpg, stream_seed(7, 3, 11), o), decode(jpg, stream_seed(7, 3, 12), o));  // another index
}

TEST(Transforms, Uint8AndFloatLayoutsAgree) {
  const auto jpg = test::encode(test::noise_image(120, 90), ".jpg");
  TransformOptions f;
  f.size = 16;
  TransformOptions u = f;
  u.format = PixelFormat::kUint8Hwc;
  const auto floats = decode(jpg, 5, f);
  std::vector<uint8_t> bytes(3 * 16 * 16);
  DecodeScratch scratch;
  SampleRng rng(5);
  decode_into(jpg.data(), jpg.size(), true, u, rng, scratch, bytes.data());
  for (int c = 0; c < 3; ++c) {
    for (int p = 0; p < 16 * 16; ++p) {
      const float expect = (bytes[p * 3 + c] / 255.0f - f.mean[c]) / f.std[c];
      ASSERT_NEAR(floats[c * 256 + p], expect, 1e-5);
    }
  }
}

TEST(Transforms, CorruptDataThrows) {
  std::vector<uint8_t> junk(1000, 0x42);
  TransformOptions o;
  EXPECT_THROW(decode(junk, 1, o), std::runtime_error);
}

TEST(Dataset, BadImageIsReplacedAndCountedUnderSkip) {
  const std::string root = test::make_dataset("bad_skip", 2, 4, 1, 32);
  ImageFolder folder = scan_image_folder(root, "train");
  { std::ofstream(folder.samples[0].path, std::ios::trunc) << "not a jpeg"; }
  TransformOptions o;
  o.size = 16;
  Dataset ds(folder, o, true, BadImagePolicy::kSkip);
  test::SampleReader reader(ds);
  EXPECT_GE(reader.load(0, 0, 0), 1);
  EXPECT_EQ(ds.distinct_bad_images(), 1);
  EXPECT_GE(reader.label, 0);
}

}  // namespace
}  // namespace pinfeed::data

namespace pinfeed::data {
namespace {

TEST(Transforms, CorruptDataThrowsEvenAfterAGoodImageInTheSameScratch) {
  const auto good = test::encode(test::noise_image(64, 48), ".jpg");
  const std::vector<uint8_t> junk = {'g', 'a', 'r', 'b', 'a', 'g', 'e'};
  TransformOptions o;
  o.size = 16;
  std::vector<float> out(3 * 16 * 16);
  DecodeScratch scratch;
  SampleRng rng(1);
  decode_into(good.data(), good.size(), true, o, rng, scratch, out.data());
  EXPECT_THROW(decode_into(junk.data(), junk.size(), true, o, rng, scratch, out.data()), std::runtime_error);
}

}  // namespace
}  // namespace pinfeed::data

namespace pinfeed::data {
namespace {

// Smooth content, so that any misplaced crop shows as a large difference.
cv::Mat gradient_image(int w, int h) {
  cv::Mat m(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) m.at<cv::Vec3b>(y, x) = cv::Vec3b(x * 255 / w, y * 255 / h, (x + y) * 127 / (w + h));
  }
  return m;
}

TEST(Transforms, CropRegionDecodeMatchesFullDecodeThenCrop) {
  const auto jpg = test::encode(gradient_image(500, 375), ".jpg");
  TransformOptions full;
  full.size = 64;
  full.format = PixelFormat::kUint8Hwc;
  full.crop_decode = false;
  TransformOptions region = full;
  region.crop_decode = true;
  for (uint64_t seed = 0; seed < 40; ++seed) {  // crops of every size: DCT scales 1, 2 and 4 all occur
    std::vector<uint8_t> a(64 * 64 * 3), b(64 * 64 * 3);
    DecodeScratch s1, s2;
    SampleRng r1(seed), r2(seed);
    decode_into(jpg.data(), jpg.size(), true, full, r1, s1, a.data());
    decode_into(jpg.data(), jpg.size(), true, region, r2, s2, b.data());
    double diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff += std::abs(int(a[i]) - int(b[i]));
    EXPECT_LT(diff / a.size(), 3.0) << "seed " << seed;  // interpolation differs after DCT scaling, placement not
  }
}

}  // namespace
}  // namespace pinfeed::data

namespace pinfeed::data {
namespace {

// crop_decode off decodes non-CMYK JPEGs with libjpeg-turbo itself (to see its warnings without a second pass):
// it must stay the OpenCV reference, pixel for pixel.
TEST(Transforms, LibjpegFullDecodeIsPixelIdenticalToOpenCv) {
  cv::Mat gray;
  cv::cvtColor(test::noise_image(97, 65), gray, cv::COLOR_BGR2GRAY);
  const std::vector<std::vector<uint8_t>> files = {
      test::encode(gradient_image(500, 375), ".jpg", {cv::IMWRITE_JPEG_QUALITY, 75}),
      test::encode(test::noise_image(333, 211), ".jpg", {cv::IMWRITE_JPEG_QUALITY, 95}),
      test::encode(test::noise_image(120, 90), ".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1}),
      test::encode(gray, ".jpg")};
  for (size_t i = 0; i < files.size(); ++i) {
    const auto& jpg = files[i];
    const cv::Mat reference = cv::imdecode(jpg, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
    std::vector<uint8_t> buffer;
    JpegRegion full;
    ASSERT_TRUE(decode_jpeg_region(jpg.data(), jpg.size(), cv::Rect(0, 0, reference.cols, reference.rows), 1, 0,
                                   buffer, &full));
    const cv::Mat mine = full.pixels(full.crop);
    ASSERT_EQ(mine.size(), reference.size()) << "file " << i;
    EXPECT_EQ(cv::norm(mine, reference, cv::NORM_INF), 0.0) << "file " << i;
  }
}

}  // namespace
}  // namespace pinfeed::data
