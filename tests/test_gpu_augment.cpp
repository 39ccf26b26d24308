// GPU tests (ctest label "gpu"): the augmentations' CUDA path gives the CPU path's pixels for the same draws (the
// CPU path is held against torchvision and timm by check_augment.py). Skipped, not failed, without a CUDA device.
#include <gtest/gtest.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include "data/dataset/image_folder.h"
#include "pipeline/augment/augmenter.h"
#include "pipeline/augment/normalise_mix.h"
#include "pipeline/transfer/feeder.h"
#include "test_util.h"

namespace pinfeed::pipeline::augment {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device"

const c10::Device kCuda(c10::kCUDA, 0);
const c10::Device kCpu(c10::kCPU);

// Share of values differing by more than `levels`, and the largest difference.
std::pair<double, int64_t> difference(const at::Tensor& a, const at::Tensor& b, int64_t levels) {
  const at::Tensor d = (a.cpu().to(at::kInt) - b.cpu().to(at::kInt)).abs();
  return {d.gt(levels).to(at::kFloat).mean().item<double>(), d.max().item<int64_t>()};
}

TEST(AugmentGpu, EveryOpGivesTheCpusPixelsForEachImagesMagnitude) {
  SKIP_WITHOUT_CUDA();
  const int side = 48, n = 12;
  const OpSpace space(parse_policy("trivial"), side, side);
  const at::Tensor images = at::randint(0, 256, {n, side, side, 3}, at::TensorOptions().dtype(at::kByte)).permute({0, 3, 1, 2});
  for (const PixelOpOptions& o : {PixelOpOptions{}, PixelOpOptions{Interpolation::kBilinear, std::array<float, 3>{124, 116, 104}}}) {
    for (Op op : space.ops()) {
      std::vector<float> params;
      for (int i = 0; i < n; ++i) {  // a different bin and sign per image
        const int bin = space.has_magnitudes(op) ? (i * 7) % space.bins() : -1;
        const OpParams p = op_params(op, space.magnitude(op, bin, i % 2 == 1), side, side);
        params.insert(params.end(), p.begin(), p.end());
      }
      const at::Tensor p = at::tensor(params).view({n, kParams});
      const at::Tensor cpu = apply_kind(kind_of(op), images, p, o);
      const at::Tensor cuda = apply_kind(kind_of(op), images.to(kCuda), p.to(kCuda), o);
      const auto [off, largest] = difference(cpu, cuda, 1);
      if (kind_of(op) == Kind::kAffine) {
        EXPECT_LE(off, 2e-3) << op_name(op) << ": grid points on pixel edges may round the other way";
      } else {
        EXPECT_LE(largest, 1) << op_name(op) << ": float sums in another order move a value by one level at most";
      }
    }
  }
}

AugmentOptions every_augmentation(const char* policy) {
  AugmentOptions o;
  o.auto_augment = parse_policy(policy);
  o.erasing_p = 0.5;  // value zero: the random values come from each device's own generator
  o.mixup_alpha = 0.8;
  o.cutmix_alpha = 1.0;
  o.num_classes = 10;
  o.label_smoothing = 0.1;
  return o;
}

TEST(AugmentGpu, AugmenterOnCudaMatchesTheCpuForTheSameDraws) {
  SKIP_WITHOUT_CUDA();
  for (const char* policy : {"trivial", "rand-m9-n2", "imagenet"}) {
    const AugmentOptions o = every_augmentation(policy);
    const Augmenter cpu(o, DrawKeys{3, 32, 0, 1}, kCpu), cuda(o, DrawKeys{3, 32, 0, 1}, kCuda);
    for (int64_t index = 0; index < 4; ++index) {
      const BatchDraws d = cpu.draw(1, index, 32, 40);
      at::Tensor pixels = at::randint(0, 256, {32, 40, 40, 3}, at::TensorOptions().dtype(at::kByte));
      at::Tensor on_gpu = pixels.to(kCuda);
      cpu.apply_pixels(pixels, cpu.upload(d));
      const DeviceDraws dd = cuda.upload(cuda.draw(1, index, 32, 40));
      cuda.apply_pixels(on_gpu, dd);
      EXPECT_LE(difference(pixels, on_gpu, 1).first, 2e-3) << policy << " batch " << index;
      // The normalised batch from the same pixels: erasing and Mixup/CutMix.
      at::Tensor x = at::randn({32, 3, 40, 40}), labels = at::randint(0, 10, {32}, at::TensorOptions().dtype(at::kLong));
      at::Tensor x_gpu = x.to(kCuda), labels_gpu = labels.to(kCuda);
      cpu.apply_batch(x, labels, d, cpu.upload(d));
      cuda.apply_batch(x_gpu, labels_gpu, d, dd);
      EXPECT_TRUE(at::allclose(x, x_gpu.cpu(), 1e-5, 1e-6)) << policy << " batch " << index;
      EXPECT_TRUE(at::equal(labels, labels_gpu.cpu())) << policy << " batch " << index;
    }
  }
}

// The tensor's bits, NCHW order, on the CPU: equal also tells -0 from +0.
at::Tensor bits(const at::Tensor& t) {
  return t.contiguous().view(t.element_size() == 2 ? at::kShort : at::kInt).cpu();
}

TEST(AugmentGpu, FusedNormaliseMixWritesTheAtenChainsBits) {
  SKIP_WITHOUT_CUDA();
  const int n = 7, side = 40;  // odd: the middle image mixes with itself
  const data::PixelAffine affine = data::uint8_normalisation(data::TransformOptions{});
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(kCuda);
  const at::Tensor scale = at::tensor(std::vector<float>(affine.scale, affine.scale + 3)).view({1, 3, 1, 1}).to(f32);
  const at::Tensor shift = at::tensor(std::vector<float>(affine.shift, affine.shift + 3)).view({1, 3, 1, 1}).to(f32);
  const at::Tensor pixels = at::randint(0, 256, {n, side, side, 3}, at::TensorOptions().dtype(at::kByte)).to(kCuda);
  MixDraw mixup, cutmix;
  mixup.lam = mixup.beta = 0.6180339887498949;  // neither lam nor 1 - lam a float
  cutmix.cutmix = true;
  cutmix.yl = 3, cutmix.yh = 29, cutmix.xl = 17, cutmix.xh = 40;  // one edge on the image's
  cutmix.lam = 1.0 - 26.0 * 23.0 / (side * side);
  const std::pair<const char*, MixDraw> draws[] = {{"none", MixDraw{}}, {"mixup", mixup}, {"cutmix", cutmix}};
  for (const auto& [name, draw] : draws) {
    for (const auto& [dtype, channels] : {std::pair{at::kHalf, 4}, std::pair{at::kFloat, 3}, std::pair{at::kHalf, 3},
                                          std::pair{at::kFloat, 4}}) {
      at::Tensor chain = normalise(pixels, scale, shift);
      at::Tensor labels = at::randint(0, 10, {n}, at::TensorOptions().dtype(at::kLong).device(kCuda));
      mix(chain, labels, draw, 10, 0.1);
      chain = model_input(chain, channels, dtype);
      const at::Tensor fused = normalise_mix(pixels, affine, draw, channels, dtype, gpu::current_stream(kCuda));
      ASSERT_EQ(fused.sizes(), chain.sizes()) << name;
      EXPECT_EQ(fused.scalar_type(), dtype) << name;
      EXPECT_TRUE(fused.is_contiguous(at::MemoryFormat::ChannelsLast)) << name;
      EXPECT_TRUE(at::equal(bits(fused), bits(chain))) << name << " " << dtype << " " << channels << " channels";
    }
  }
}

// The CUDA Feeder (dual stream) against the CPU Feeder, both augmenting with `o` on a tiny ImageFolder.
void expect_cuda_feeder_augments_as_cpu(AugmentOptions o) {
  const std::string root = test::make_dataset("gpu_augment", 3, 8, 0, 48);
  data::TransformOptions t;
  t.size = 32;
  t.format = data::PixelFormat::kUint8Hwc;
  const auto set = std::make_shared<data::Dataset>(data::scan_image_folder(root, "train"), t, true, data::BadImagePolicy::kSkip);
  data::LoaderOptions lo;
  lo.batch_size = 4;
  lo.workers = 2;
  lo.seed = 4;
  o.num_classes = 3;
  PipelineOptions cpu_mode;
  cpu_mode.transfer_dtype = TransferDtype::kUint8;
  PipelineOptions dual = cpu_mode;
  apply_preset(*find_preset("dual_stream"), dual);
  FeederOptions on_cuda;
  on_cuda.device = kCuda;
  on_cuda.compute_stream = gpu::current_stream(kCuda);
  Feeder cpu(set, lo, cpu_mode, FeederOptions{}, o), cuda(set, lo, dual, on_cuda, o);
  cpu.start_epoch(2);
  cuda.start_epoch(2);
  int batches = 0;
  while (auto a = cpu.next()) {
    auto b = cuda.next();
    ASSERT_TRUE(b);
    // A level is 1 / (255 std) ~ 0.017 after normalisation; a few pixels of a warp may round the other way.
    const at::Tensor off = (a->images - b->images.cpu()).abs().gt(0.02);
    EXPECT_LE(off.to(at::kFloat).mean().item<double>(), 2e-3) << "batch " << batches;
    EXPECT_TRUE(at::equal(a->labels, b->labels.cpu())) << "batch " << batches;
    ++batches;
  }
  EXPECT_EQ(batches, 6);
  EXPECT_FALSE(cuda.next());
}

TEST(AugmentGpu, DualStreamFeederAugmentsAsTheCpuFeeder) {
  SKIP_WITHOUT_CUDA();
  expect_cuda_feeder_augments_as_cpu(every_augmentation("trivial"));
}

TEST(AugmentGpu, DualStreamFeederWithoutErasingMixesInOneKernelAsTheCpuFeeder) {
  SKIP_WITHOUT_CUDA();
  AugmentOptions o = every_augmentation("trivial");
  o.erasing_p = 0;  // the CUDA Feeder's fused kernel (normalise_mix.h), the CPU's ATen chain
  expect_cuda_feeder_augments_as_cpu(o);
}

}  // namespace
}  // namespace pinfeed::pipeline::augment
