// GPU JPEG decode (ctest label "gpu"; skipped without CUDA): nvJPEG's pixels against the CPU path's for the same
// files and crops, each kind of file on its documented path, and a Feeder decoding on the GPU giving the CPU
// Feeder's batches.
#include <gtest/gtest.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/sub.h>

#include <c10/core/StreamGuard.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "decode_cases.h"
#include "pipeline/transfer/feeder.h"
#include "gpu/gpu.h"
#include "pipeline/decode/jpeg_decoder.h"

namespace pinfeed::pipeline {
namespace {

#define SKIP_WITHOUT_NVJPEG()                                                                      \
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";                                          \
  if (!pipeline::JpegDecoder::unavailable_reason().empty()) GTEST_SKIP() << pipeline::JpegDecoder::unavailable_reason()

const c10::Device kCuda(c10::kCUDA, 0);

// Mean absolute difference, in uint8 levels, that the GPU path may show against the CPU path per image. They
// differ in chroma upsampling (libjpeg-turbo's fancy upsampling vs nvJPEG's), in the IDCT, and where the CPU
// shrinks by a DCT scale the GPU averages blocks; on smooth images that is about one level.
constexpr double kMaxMeanAbsDiff = 3.0;

TEST(GpuDecode, PixelsMatchTheCpuPathWithinASmallMeanAbsoluteDifference) {
  SKIP_WITHOUT_NVJPEG();
  const std::vector<test::NamedFile> files = test::decode_cases(/*corrupt=*/false);
  const data::ImageFolder folder = test::write_folder("gpu_decode_pixels", files);
  const int64_t n = static_cast<int64_t>(files.size());
  for (bool train : {true, false}) {
    for (bool crop_decode : {true, false}) {
      data::TransformOptions o;
      o.size = 96;
      o.format = data::PixelFormat::kUint8Hwc;
      o.crop_decode = crop_decode;
      const data::Dataset cpu(folder, o, train, data::BadImagePolicy::kFail);
      o.gpu_decode = true;
      const data::Dataset gpu_ds(folder, o, train, data::BadImagePolicy::kFail);
      pipeline::JpegDecoder decoder(kCuda, o, /*budget_bytes=*/8 << 20);  // small: several chunks per batch
      const c10::Stream stream = gpu::new_stream(kCuda);
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        std::vector<data::EncodedImage> encoded(n);
        const size_t bytes = cpu.image_bytes();
        std::vector<uint8_t> expected(n * bytes), staged(n * bytes, 0);
        data::DecodeScratch scratch;
        int64_t label = 0;
        for (int64_t i = 0; i < n; ++i) {
          cpu.load(i, 3, epoch, expected.data() + i * bytes, &label, scratch);
          gpu_ds.load(i, 3, epoch, staged.data() + i * bytes, &label, scratch, &encoded[i]);
        }
        // The samples the CPU decoded cross as they are; the decoder writes every sample of `out` (NaN first).
        at::Tensor pixels = at::full({n, o.size, o.size, 3}, 7, at::TensorOptions().dtype(at::kByte).device(kCuda));
        for (int64_t i = 0; i < n; ++i) {
          if (encoded[i].kind == data::JpegRoute::kCpu) {
            pixels[i].copy_(at::from_blob(staged.data() + i * bytes, {o.size, o.size, 3}, at::kByte));
          }
        }
        // Both layouts the model may take: channels_last for the train crops, contiguous for the val crops.
        const at::Tensor out =
            at::full({n, 3, o.size, o.size}, std::nanf(""), at::TensorOptions().dtype(at::kFloat).device(kCuda))
                .contiguous(train ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
        decoder.decode(encoded.data(), n, pixels, out, stream);
        gpu::synchronize(stream);
        // Back to uint8 levels, (S, S, 3) per sample: u = (v - shift) / scale, exact after rounding.
        const data::PixelAffine a = data::uint8_normalisation(o);
        const at::Tensor scale = at::from_blob(const_cast<float*>(a.scale), {1, 3, 1, 1}).to(kCuda);
        const at::Tensor shift = at::from_blob(const_cast<float*>(a.shift), {1, 3, 1, 1}).to(kCuda);
        const at::Tensor levels = out.sub(shift).div(scale).permute({0, 2, 3, 1}).contiguous().cpu();
        ASSERT_TRUE(levels.isfinite().all().item<bool>()) << "a sample the decoder did not write";
        for (int64_t i = 0; i < n; ++i) {
          const float* g = levels.data_ptr<float>() + i * bytes;
          const uint8_t* e = expected.data() + i * bytes;
          double sum = 0;
          int worst = 0;
          for (size_t k = 0; k < bytes; ++k) {
            const int d = std::abs(static_cast<int>(std::lround(g[k])) - int{e[k]});
            sum += d;
            worst = std::max(worst, d);
          }
          const double mad = sum / static_cast<double>(bytes);
          std::printf("%-24s %-5s crop_decode=%d reduction=%d kind=%d  MAD %.2f  max %d\n", files[i].name.c_str(),
                      train ? "train" : "val", crop_decode, encoded[i].reduction, static_cast<int>(encoded[i].kind),
                      mad, worst);
          EXPECT_LE(mad, kMaxMeanAbsDiff) << files[i].name << (train ? ", train" : ", val") << ", epoch " << epoch;
          if (encoded[i].kind == data::JpegRoute::kCpu) {
            EXPECT_EQ(worst, 0) << files[i].name << ": the CPU's pixels, only normalised";
          }
        }
      }
      const pipeline::JpegDecodeStats s = decoder.stats();
      EXPECT_EQ(s.cpu_fallback, 0);
      EXPECT_GT(s.hybrid, 0);  // the progressive files
      if (s.hardware_backend) {
        EXPECT_GT(s.hardware, 0);
        EXPECT_GT(s.pool_images, 0);  // sized, then grown by later chunks (more images, larger ones), within budget
        EXPECT_LE(4.0 * s.pool_images * s.pool_width * s.pool_height, 8 << 20);
      }
      EXPECT_GT(s.peak_buffer_bytes, 0);
      EXPECT_LE(s.peak_buffer_bytes, (8 << 20) + 1600 * 1200 * 3 + 256 * n);  // the budget, or one image over it
    }
  }
}

// nvJPEG writes into memory the decoder keeps: tensors the caching allocator hands out on the decode's stream
// right after a call returns hold what was put in them. When each chunk's buffers went back to the allocator, memory
// handed out after them was overwritten (a device-side assert in the augmentations' histogram).
TEST(GpuDecode, MemoryAllocatedAfterADecodeKeepsWhatWasWrittenInIt) {
  SKIP_WITHOUT_NVJPEG();
  const std::vector<test::NamedFile> files = test::decode_cases(/*corrupt=*/false);
  const data::ImageFolder folder = test::write_folder("gpu_decode_reuse", files);
  const int64_t n = static_cast<int64_t>(files.size());
  data::TransformOptions o;
  o.size = 96;
  o.format = data::PixelFormat::kUint8Hwc;
  o.gpu_decode = true;
  const data::Dataset ds(folder, o, /*train=*/true, data::BadImagePolicy::kFail);
  pipeline::JpegDecoder decoder(kCuda, o, /*budget_bytes=*/8 << 20);
  const c10::Stream stream = gpu::new_stream(kCuda);
  const auto on_cuda = at::TensorOptions().dtype(at::kByte).device(kCuda);
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    std::vector<data::EncodedImage> encoded(n);
    std::vector<uint8_t> staged(n * ds.image_bytes(), 0);
    data::DecodeScratch scratch;
    int64_t label = 0;
    for (int64_t i = 0; i < n; ++i) ds.load(i, 3, epoch, staged.data() + i * ds.image_bytes(), &label, scratch, &encoded[i]);
    const at::Tensor pixels = at::full({n, o.size, o.size, 3}, 7, on_cuda);
    const at::Tensor out = at::empty({n, o.size, o.size, 3}, on_cuda).permute({0, 3, 1, 2});
    decoder.decode(encoded.data(), n, pixels, out, stream);
    std::vector<at::Tensor> probes;
    {
      const c10::StreamGuard guard(stream);
      for (int64_t bytes = 16 << 20; bytes >= 4096; bytes /= 2) probes.push_back(at::full({bytes}, 0x5A, on_cuda));
    }
    gpu::synchronize(stream);
    for (const at::Tensor& p : probes) EXPECT_TRUE(p.eq(0x5A).all().item<bool>()) << "epoch " << epoch << ", " << p.numel() << " bytes";
  }
}

// A Feeder decoding on the GPU against one whose workers decode, batch for batch. pad: model.pad_input's input
// (float16, a zero fourth channel), which the GPU decoder's kernel and the uint8 path each write. augment: both
// augment their batches (the GPU decoder then writes uint8 pixels for the Feeder's augmentations), with the same
// draws; the policy's ops may widen the decoders' differences at thresholds (solarize, posterize, equalize).
void expect_gpu_decoding_feeder_matches_the_cpu_one(bool pad, bool augment = false) {
  const std::vector<test::NamedFile> files = test::decode_cases(/*corrupt=*/true);
  const data::ImageFolder folder = test::write_folder("gpu_decode_feeder", files);
  data::LoaderOptions lo;
  lo.batch_size = 8;
  lo.workers = 2;
  lo.seed = 11;
  FeederOptions fo;
  fo.device = kCuda;
  fo.compute_stream = gpu::current_stream(kCuda);
  fo.channels_last = true;
  if (pad) {
    fo.input_dtype = at::kHalf;
    fo.input_channels = 4;
  }
  PipelineOptions po;
  apply_preset(*find_preset("dual_stream"), po);
  po.transfer_dtype = TransferDtype::kUint8;
  std::map<bool, std::vector<at::Tensor>> images, labels;
  std::map<bool, int> bad;
  for (bool on_gpu : {false, true}) {
    data::TransformOptions o;
    o.size = 64;
    o.format = data::PixelFormat::kUint8Hwc;
    o.gpu_decode = on_gpu;
    auto ds = std::make_shared<data::Dataset>(folder, o, true, data::BadImagePolicy::kSkip);
    augment::AugmentOptions a;
    if (augment) {
      a.auto_augment = augment::parse_policy("trivial");
      a.erasing_p = 0.5;
      a.mixup_alpha = 0.8;
      a.cutmix_alpha = 1.0;
      a.num_classes = static_cast<int64_t>(folder.classes.size());
    }
    Feeder feeder(ds, lo, po, fo, a);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      feeder.start_epoch(epoch);
      while (auto b = feeder.next()) {
        EXPECT_EQ(b->images.scalar_type(), fo.input_dtype);
        EXPECT_EQ(b->images.size(1), fo.input_channels);
        if (pad) {
          EXPECT_EQ(b->images.select(1, 3).abs().sum().item<float>(), 0.f);
        }
        images[on_gpu].push_back(b->images.narrow(1, 0, 3).cpu().to(at::kFloat));
        labels[on_gpu].push_back(b->labels.cpu());
        bad[on_gpu] += b->bad_images;
      }
    }
    EXPECT_EQ(feeder.decode_stats().has_value(), on_gpu);
  }
  ASSERT_EQ(images[true].size(), images[false].size());
  EXPECT_EQ(bad[true], bad[false]);
  EXPECT_GT(bad[true], 0);
  for (size_t k = 0; k < images[true].size(); ++k) {
    EXPECT_TRUE(labels[true][k].equal(labels[false][k])) << "batch " << k;
    // Normalised values: one uint8 level is 1 / (255 * std) ~ 0.017.
    const double mad = images[true][k].sub(images[false][k]).abs().mean().item().toDouble() * 255 * 0.226;
    EXPECT_LE(mad, augment ? 2 * kMaxMeanAbsDiff : kMaxMeanAbsDiff) << "batch " << k;
  }
}

TEST(GpuDecode, FeederDecodingOnTheGpuGivesTheCpuFeedersBatches) {
  SKIP_WITHOUT_NVJPEG();
  expect_gpu_decoding_feeder_matches_the_cpu_one(false);
}

TEST(GpuDecode, FeederDecodingOnTheGpuGivesTheCpuFeedersPaddedFloat16Batches) {
  SKIP_WITHOUT_NVJPEG();
  expect_gpu_decoding_feeder_matches_the_cpu_one(true);
}

TEST(GpuDecode, FeederDecodingOnTheGpuAugmentsItsBatchesAsTheCpuFeeder) {
  SKIP_WITHOUT_NVJPEG();
  expect_gpu_decoding_feeder_matches_the_cpu_one(true, /*augment=*/true);
}

}  // namespace
}  // namespace pinfeed::pipeline
