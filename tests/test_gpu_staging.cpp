// The CPU half of GPU decode (data.decoder = "nvjpeg"): which files the GPU takes, and that a sample left encoded
// carries exactly the crop the CPU path draws, while bad files are found, counted and replaced exactly as there.
#include <gtest/gtest.h>

#include "data/error.h"
#include "data/jpeg/jpeg_header.h"
#include "decode_cases.h"

namespace pinfeed::data {
namespace {

JpegRoute kind_of(const test::Bytes& bytes) {
  JpegInfo info;
  if (!parse_jpeg_info(bytes.data(), bytes.size(), &info, /*count_scans=*/true)) return JpegRoute::kCpu;
  return gpu_decode_for(info, 0);
}

TEST(JpegHeader, EachKindOfFileGoesToTheDecoderThatTakesIt) {
  for (const test::NamedFile& f : test::decode_cases(false)) {
    JpegRoute want = JpegRoute::kHardware;
    if (f.name.rfind("progressive", 0) == 0) want = JpegRoute::kHybrid;
    if (f.name == "cmyk" || f.name == "png") want = JpegRoute::kCpu;
    EXPECT_EQ(kind_of(f.bytes), want) << f.name;
  }
  JpegInfo info;
  const test::Bytes jpg = test::encode(test::smooth_image(64, 48, 1), ".jpg");
  ASSERT_TRUE(parse_jpeg_info(jpg.data(), jpg.size(), &info));
  EXPECT_EQ(info.width, 64);
  EXPECT_EQ(info.height, 48);
  EXPECT_EQ(info.components, 3);
  EXPECT_EQ(info.sampling[0], 0x22);  // OpenCV writes 4:2:0
  EXPECT_EQ(gpu_decode_for(info, 64 * 48 - 1), JpegRoute::kCpu);  // over the GPU's pixel bound: the CPU
  EXPECT_FALSE(parse_jpeg_info(jpg.data(), 20, &info));  // cut before the frame header

  // What the hardware engines do not take (nvjpeg.h: baseline, single scan), and what libjpeg reads as RGB.
  const cv::Mat img = test::smooth_image(64, 48, 3);
  EXPECT_EQ(kind_of(test::encode_libjpeg(img, test::Libjpeg::kMultiScan)), JpegRoute::kHybrid);
  EXPECT_EQ(kind_of(test::encode_libjpeg(img, test::Libjpeg::kExtended)), JpegRoute::kHybrid);
  EXPECT_EQ(kind_of(test::encode_libjpeg(img, test::Libjpeg::kRgb)), JpegRoute::kCpu);
  EXPECT_EQ(kind_of(test::encode_libjpeg(img, test::Libjpeg::k444)), JpegRoute::kHardware);
  test::Bytes ff01 = jpg;  // a TEM marker (no length) after SOI: libjpeg and both header readers skip it
  ff01.insert(ff01.begin() + 2, {0xFF, 0x01});
  int w = 0, h = 0;
  ASSERT_TRUE(peek_image_size(ff01.data(), ff01.size(), &w, &h));
  EXPECT_EQ(w, 64);
  EXPECT_EQ(kind_of(ff01), JpegRoute::kHardware);
}

// uint8 pixels (what the GPU path needs), decoded on the GPU or not.
TransformOptions uint8_options(int size, bool gpu_decode) {
  TransformOptions o;
  o.size = size;
  o.format = PixelFormat::kUint8Hwc;
  o.gpu_decode = gpu_decode;
  return o;
}

// What a sample becomes through the GPU path's CPU half: the CPU's pixels when it decoded them, else the CPU
// decoding the EncodedImage's file with its box (decode_box_into, the same geometry the GPU uses).
std::vector<uint8_t> staged_pixels(const Dataset& ds, int64_t index, uint64_t seed, int64_t epoch, int* bad,
                                   int64_t* label, EncodedImage* encoded) {
  std::vector<uint8_t> pixels(ds.image_bytes(), 0);
  DecodeScratch scratch;
  *bad = ds.load(index, seed, epoch, pixels.data(), label, scratch, encoded);
  if (encoded->kind != JpegRoute::kCpu) {
    decode_box_into(encoded->bytes.data(), encoded->bytes.size(), encoded->box, ds.transform(), scratch, pixels.data());
  }
  return pixels;
}

TEST(GpuStaging, EverySampleGetsTheCpuPathsCropAndBadFilesTheCpuPathsReplacement) {
  const std::vector<test::NamedFile> files = test::decode_cases(/*corrupt=*/true);
  const ImageFolder folder = test::write_folder("gpu_staging", files);
  for (bool train : {true, false}) {
    const Dataset cpu(folder, uint8_options(64, false), train, BadImagePolicy::kSkip);
    const Dataset gpu(folder, uint8_options(64, true), train, BadImagePolicy::kSkip);
    test::SampleReader reader(cpu);
    std::vector<uint8_t> cpu_pixels(cpu.image_bytes());
    DecodeScratch scratch;
    int left_encoded = 0;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      for (int64_t i = 0; i < static_cast<int64_t>(files.size()); ++i) {
        int64_t cpu_label = -1, gpu_label = -2;
        const int cpu_bad = cpu.load(i, 7, epoch, cpu_pixels.data(), &cpu_label, scratch);
        int gpu_bad = 0;
        EncodedImage encoded;
        const std::vector<uint8_t> gpu_pixels = staged_pixels(gpu, i, 7, epoch, &gpu_bad, &gpu_label, &encoded);
        EXPECT_EQ(gpu_bad, cpu_bad) << files[i].name;
        EXPECT_EQ(gpu_label, cpu_label) << files[i].name;
        EXPECT_EQ(gpu_pixels, cpu_pixels) << files[i].name << (train ? ", train" : ", val") << ", epoch " << epoch;
        left_encoded += encoded.kind != JpegRoute::kCpu;
      }
    }
    EXPECT_GT(left_encoded, 0);
    EXPECT_EQ(gpu.distinct_bad_images(), cpu.distinct_bad_images());
    EXPECT_EQ(gpu.distinct_bad_images(), static_cast<int64_t>(test::corrupt_files().size()));
  }
}

// data.nvjpeg_share: the samples the GPU does not take are decoded by the worker, pixel for pixel the CPU
// path's; which ones is fixed by index, the same every epoch.
TEST(GpuStaging, AShareBelowOneLeavesAFixedPartOfTheSamplesToTheWorkers) {
  std::vector<test::NamedFile> files;
  for (int i = 0; i < 64; ++i) files.push_back({"f" + std::to_string(i), test::encode(test::smooth_image(80, 60, i), ".jpg")});
  const ImageFolder folder = test::write_folder("gpu_staging_share", files);
  TransformOptions o = uint8_options(32, true);
  o.nvjpeg_share = 0.5;
  const Dataset gpu(folder, o, true, BadImagePolicy::kSkip);
  const Dataset cpu(folder, uint8_options(32, false), true, BadImagePolicy::kSkip);
  std::vector<uint8_t> cpu_pixels(cpu.image_bytes());
  DecodeScratch scratch;
  std::vector<bool> first_epoch;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    int on_gpu = 0;
    for (int64_t i = 0; i < 64; ++i) {
      int bad = 0;
      int64_t label = 0;
      EncodedImage encoded;
      const std::vector<uint8_t> pixels = staged_pixels(gpu, i, 3, epoch, &bad, &label, &encoded);
      const bool taken = encoded.kind != JpegRoute::kCpu;
      EXPECT_EQ(taken, gpu_takes(i, 0.5)) << i;
      if (epoch == 0) first_epoch.push_back(taken);
      EXPECT_EQ(taken, first_epoch[i]) << i;
      cpu.load(i, 3, epoch, cpu_pixels.data(), &label, scratch);
      EXPECT_EQ(pixels, cpu_pixels) << i;
      on_gpu += taken;
    }
    EXPECT_GT(on_gpu, 16);  // a fixed draw: 64 samples at 0.5 give 32 +- a few
    EXPECT_LT(on_gpu, 48);
  }
  int taken = 0;
  for (int64_t i = 0; i < 100000; ++i) taken += gpu_takes(i, 0.25);
  EXPECT_NEAR(taken / 100000.0, 0.25, 0.01);
  EXPECT_TRUE(gpu_takes(12345, 1.0));
  EXPECT_FALSE(gpu_takes(12345, 0.0));
}

TEST(GpuStaging, ABadFileStopsTheRunUnderPolicyFailAsOnTheCpuPath) {
  const std::vector<test::NamedFile> files = {{"good", test::encode(test::smooth_image(80, 60, 2), ".jpg")},
                                              {"bad", test::corrupt_files()[0].bytes, true}};
  const ImageFolder folder = test::write_folder("gpu_staging_fail", files);
  const Dataset ds(folder, uint8_options(32, true), true, BadImagePolicy::kFail);
  int bad = 0;
  int64_t label = 0;
  EncodedImage encoded;
  EXPECT_NO_THROW(staged_pixels(ds, 0, 0, 0, &bad, &label, &encoded));
  EXPECT_EQ(encoded.kind, JpegRoute::kHardware);
  const std::string message = test::message_of<DataError>([&] { staged_pixels(ds, 1, 0, 0, &bad, &label, &encoded); });
  EXPECT_NE(message.find(folder.samples[1].path), std::string::npos) << message;
  EXPECT_NE(message.find("libjpeg"), std::string::npos) << message;
}

TEST(GpuStaging, ThePrePassChecksEachFileOnceAndLeavesBadOnesToLoad) {
  const std::vector<test::NamedFile> files = test::decode_cases(/*corrupt=*/true);
  const ImageFolder folder = test::write_folder("gpu_staging_prepass", files);
  const Dataset ds(folder, uint8_options(32, true), true, BadImagePolicy::kSkip);
  ds.check_gpu_files(2);
  EXPECT_EQ(ds.distinct_bad_images(), 0);  // found, not yet named: load() names and counts them as it meets them
  int bad = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(files.size()); ++i) {
    int b = 0;
    int64_t label = 0;
    EncodedImage encoded;
    staged_pixels(ds, i, 0, 0, &b, &label, &encoded);
    bad += files[i].bad ? 1 : 0;
    EXPECT_EQ(b > 0, files[i].bad) << files[i].name;
  }
  EXPECT_EQ(ds.distinct_bad_images(), bad);
}

}  // namespace
}  // namespace pinfeed::data
