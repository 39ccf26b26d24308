// The training batch's augmentations (pipeline/augment/) on the CPU: their options, draws and a resumed epoch.
// Their pixels against torchvision and timm: check_augment.py; the CUDA path against this one: test_gpu_augment.
#include <gtest/gtest.h>

#include <ATen/ops/allclose.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <chrono>
#include <future>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "data/dataset/image_folder.h"
#include "pipeline/augment/augmenter.h"
#include "pipeline/transfer/feeder.h"
#include "test_util.h"

namespace pinfeed::pipeline::augment {
namespace {

const c10::Device kCpu(c10::kCPU);

std::string policy_error(const std::string& text) {
  return test::message_of<std::invalid_argument>([&] { parse_policy(text); });
}

TEST(AugmentOptions, PolicyNamesReadBackAsWritten) {
  for (const char* text : {"", "trivial", "rand-m9-n2", "rand-m0-n1", "rand-m30-n16", "imagenet"}) {
    EXPECT_EQ(policy_text(parse_policy(text)), text);
  }
  const PolicyOptions p = parse_policy("rand-n3-m5");  // timm's order either way
  EXPECT_EQ(p.policy, Policy::kRandAugment);
  EXPECT_EQ(p.rand_ops, 3);
  EXPECT_EQ(p.rand_magnitude, 5);
  EXPECT_EQ(policy_text(p), "rand-m5-n3");
}

TEST(AugmentOptions, BadPolicyNamesSayWhatIsAllowed) {
  for (const char* text : {"rand-m31-n2", "rand-m9-n0", "rand-m9-n17", "rand-m9", "auto", "Trivial", "rand-m9-n2-x"}) {
    const std::string message = policy_error(text);
    EXPECT_NE(message.find("must be \"\" (off), \"trivial\""), std::string::npos) << text << ": " << message;
    EXPECT_NE(message.find(std::string("got \"") + text + "\""), std::string::npos) << message;
  }
}

TEST(AugmentOptions, FillIsOneValueOrThree) {
  EXPECT_FALSE(parse_fill(""));
  EXPECT_EQ(*parse_fill("128"), (std::array<float, 3>{128, 128, 128}));
  EXPECT_EQ(*parse_fill("124, 116,104"), (std::array<float, 3>{124, 116, 104}));
  EXPECT_EQ(fill_text(parse_fill("124,116,104")), "124,116,104");
  EXPECT_EQ(fill_text(parse_fill("0")), "0");
  for (const char* bad : {"256", "1,2", "1,2,3,4", "-1", "a", "1,,2", "1,2,3,"}) {
    EXPECT_THROW(parse_fill(bad), std::invalid_argument) << bad;
  }
}

TEST(OpSpace, MagnitudeTablesAreTorchvisions) {
  const OpSpace wide(parse_policy("trivial"), 224, 224);
  EXPECT_EQ(wide.bins(), 31);
  EXPECT_EQ(wide.ops().size(), 14u);
  EXPECT_EQ(wide.magnitude(Op::kRotate, 30, false), 135.0);
  EXPECT_EQ(wide.magnitude(Op::kRotate, 0, true), -0.0);
  EXPECT_EQ(wide.magnitude(Op::kShearX, 30, true), static_cast<double>(0.99f) * -1);
  EXPECT_EQ(wide.magnitude(Op::kTranslateY, 30, false), 32.0);
  EXPECT_EQ(wide.magnitude(Op::kSolarize, 0, false), 255.0);
  EXPECT_EQ(wide.magnitude(Op::kSolarize, 30, false), 0.0);
  // 8 - (arange(31) / 5).round(): half to even, so bin 13 (2.6) is 5 bits and bin 12 (2.4) 6.
  EXPECT_EQ(wide.magnitude(Op::kPosterize, 0, false), 8.0);
  EXPECT_EQ(wide.magnitude(Op::kPosterize, 12, false), 6.0);
  EXPECT_EQ(wide.magnitude(Op::kPosterize, 13, false), 5.0);
  EXPECT_EQ(wide.magnitude(Op::kPosterize, 30, false), 2.0);
  EXPECT_EQ(wide.magnitude(Op::kEqualize, 5, false), 0.0);
  const OpSpace rand(parse_policy("rand-m9-n2"), 160, 160);
  EXPECT_EQ(rand.magnitude(Op::kTranslateX, 30, false), static_cast<double>(static_cast<float>(150.0 / 331.0 * 160)));
  EXPECT_EQ(rand.magnitude(Op::kRotate, 30, false), 30.0);
  const OpSpace auto_augment(parse_policy("imagenet"), 224, 224);
  EXPECT_EQ(auto_augment.bins(), 10);
  EXPECT_EQ(auto_augment.magnitude(Op::kPosterize, 9, false), 4.0);
  EXPECT_EQ(auto_augment.ops().back(), Op::kInvert);
}

TEST(OpSpace, TrivialAugmentDrawsOneOpOfFourteenAtEveryBinAndSign) {
  const OpSpace space(parse_policy("trivial"), 64, 64);
  std::set<Op> ops;
  std::set<int> bins;
  int negative = 0;
  for (uint64_t i = 0; i < 3000; ++i) {
    data::SampleRng rng(data::stream_seed(1, 0, i));
    const std::vector<OpDraw> d = space.draw(rng);
    ASSERT_EQ(d.size(), 1u);
    ops.insert(d[0].op);
    if (d[0].bin >= 0) bins.insert(d[0].bin);
    negative += d[0].negative;
    EXPECT_TRUE(!d[0].negative || OpSpace::is_signed(d[0].op)) << op_name(d[0].op);
    EXPECT_EQ(d[0].magnitude, space.magnitude(d[0].op, d[0].bin, d[0].negative));
  }
  EXPECT_EQ(ops.size(), 14u);
  EXPECT_EQ(ops.count(Op::kInvert), 0u);
  EXPECT_EQ(bins.size(), 31u);
  EXPECT_GT(negative, 500);
}

TEST(OpSpace, AutoAugmentAppliesZeroToTwoOpsOfTheImageNetPolicy) {
  const OpSpace space(parse_policy("imagenet"), 64, 64);
  std::set<size_t> counts;
  std::set<Op> ops;
  for (uint64_t i = 0; i < 3000; ++i) {
    data::SampleRng rng(data::stream_seed(2, 0, i));
    const std::vector<OpDraw> d = space.draw(rng);
    counts.insert(d.size());
    for (const OpDraw& op : d) ops.insert(op.op);
  }
  EXPECT_EQ(counts, (std::set<size_t>{0, 1, 2}));
  // The ImageNet policy uses neither translations, brightness nor ShearY.
  for (Op absent : {Op::kTranslateX, Op::kTranslateY, Op::kBrightness, Op::kShearY, Op::kIdentity}) {
    EXPECT_EQ(ops.count(absent), 0u) << op_name(absent);
  }
  EXPECT_EQ(ops.count(Op::kInvert), 1u);
  EXPECT_EQ(ops.count(Op::kShearX), 1u);
}

AugmentOptions every_augmentation(int64_t classes = 3) {
  AugmentOptions o;
  o.auto_augment = parse_policy("trivial");
  o.erasing_p = 0.5;
  o.mixup_alpha = 0.8;
  o.cutmix_alpha = 1.0;
  o.num_classes = classes;
  o.label_smoothing = 0.1;
  return o;
}

bool same_draws(const BatchDraws& a, const BatchDraws& b) {
  if (a.ops.size() != b.ops.size() || a.erasing.size() != b.erasing.size()) return false;
  for (size_t i = 0; i < a.ops.size(); ++i) {
    if (a.ops[i].size() != b.ops[i].size()) return false;
    for (size_t k = 0; k < a.ops[i].size(); ++k) {
      if (a.ops[i][k].op != b.ops[i][k].op || a.ops[i][k].magnitude != b.ops[i][k].magnitude) return false;
    }
  }
  for (size_t i = 0; i < a.erasing.size(); ++i) {
    const ErasingBox &x = a.erasing[i], &y = b.erasing[i];
    if (x.top != y.top || x.left != y.left || x.height != y.height || x.width != y.width) return false;
  }
  return a.mix.lam == b.mix.lam && a.mix.cutmix == b.mix.cutmix && a.mix.yl == b.mix.yl && a.mix.xl == b.mix.xl &&
         a.noise_seed == b.noise_seed;
}

TEST(Augmenter, DrawsDependOnlyOnSeedEpochBatchAndRank) {
  const AugmentOptions o = every_augmentation();
  const Augmenter a(o, DrawKeys{5, 16, 0, 2}, kCpu), again(o, DrawKeys{5, 16, 0, 2}, kCpu);
  const Augmenter other_rank(o, DrawKeys{5, 16, 1, 2}, kCpu), other_seed(o, DrawKeys{6, 16, 0, 2}, kCpu);
  const BatchDraws d = a.draw(4, 7, 16, 48);
  EXPECT_TRUE(same_draws(d, again.draw(4, 7, 16, 48)));
  EXPECT_FALSE(same_draws(d, a.draw(5, 7, 16, 48)));
  EXPECT_FALSE(same_draws(d, a.draw(4, 8, 16, 48)));
  EXPECT_FALSE(same_draws(d, other_rank.draw(4, 7, 16, 48)));
  EXPECT_FALSE(same_draws(d, other_seed.draw(4, 7, 16, 48)));
}

TEST(Augmenter, EachAugmentationDrawsFromItsOwnStream) {
  AugmentOptions policy_only;
  policy_only.auto_augment = parse_policy("trivial");
  const BatchDraws alone = Augmenter(policy_only, DrawKeys{5, 16, 0, 1}, kCpu).draw(1, 2, 16, 48);
  const BatchDraws with_all = Augmenter(every_augmentation(), DrawKeys{5, 16, 0, 1}, kCpu).draw(1, 2, 16, 48);
  ASSERT_EQ(alone.ops.size(), with_all.ops.size());
  for (size_t i = 0; i < alone.ops.size(); ++i) {
    EXPECT_EQ(alone.ops[i][0].op, with_all.ops[i][0].op);
    EXPECT_EQ(alone.ops[i][0].magnitude, with_all.ops[i][0].magnitude);
  }
}

TEST(PixelOps, FlatChannelsAreLeftByAutoContrastAndEqualize) {
  at::Tensor images = at::randint(0, 256, {2, 3, 16, 16}, at::TensorOptions().dtype(at::kByte));
  images[0].select(0, 1).fill_(77);
  images[1].fill_(200);
  const at::Tensor params = at::zeros({2, kParams});
  for (Kind kind : {Kind::kAutoContrast, Kind::kEqualize}) {
    const at::Tensor out = apply_kind(kind, images, params, {});
    EXPECT_TRUE(at::equal(out[0].select(0, 1), images[0].select(0, 1)));
    EXPECT_TRUE(at::equal(out[1], images[1]));
  }
}

TEST(Mixup, SoftTargetsSumToOneWithTheSmoothingFoldedIn) {
  AugmentOptions o = every_augmentation(10);
  o.mix_prob = 0;  // unmixed: the one-hot targets, smoothed as timm's mixup_target smooths them
  at::Tensor images = at::randn({4, 3, 8, 8});
  at::Tensor labels = at::tensor(std::vector<int64_t>{0, 3, 9, 3});
  data::SampleRng unmixed(1);
  const MixDraw none = draw_mix(o, 8, 8, unmixed);
  EXPECT_FALSE(none.mixed());
  mix(images, labels, none, 10, 0.1);
  ASSERT_EQ(labels.sizes(), (c10::IntArrayRef{4, 10}));
  EXPECT_FLOAT_EQ(labels[1][3].item<float>(), static_cast<float>(0.9 + 0.01));
  EXPECT_FLOAT_EQ(labels[1][4].item<float>(), 0.01f);
  o.mix_prob = 1;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    data::SampleRng rng(seed);
    const MixDraw d = draw_mix(o, 8, 8, rng);
    EXPECT_TRUE(d.lam >= 0 && d.lam <= 1) << d.lam;
    at::Tensor l = at::tensor(std::vector<int64_t>{0, 3, 9, 3});
    at::Tensor x = at::randn({4, 3, 8, 8});
    mix(x, l, d, 10, 0.1);
    EXPECT_TRUE(at::allclose(l.sum(1), at::full({4}, 1.0f), 1e-5, 1e-6));
  }
}

// Beta(a, a) for the alphas data.mixup_alpha and data.cutmix_alpha accept down to the least positive double: both
// gammas underflow to 0 below about a = 1e-3, which must not send the draw round again and again. A thread keeps
// the draws so that a hang fails this test rather than the whole binary.
TEST(Mixup, BetaOfATinyAlphaIsZeroOrOneAndReturns) {
  for (const double a : {1e-30, 1e-300, std::numeric_limits<double>::denorm_min()}) {
    auto draws = std::make_shared<std::vector<double>>();
    std::promise<void> done;
    std::future<void> finished = done.get_future();
    std::thread([a, draws, done = std::move(done)]() mutable {
      for (uint64_t seed = 0; seed < 400; ++seed) {
        data::SampleRng rng(seed);
        draws->push_back(sample_beta(a, rng));
      }
      done.set_value();
    }).detach();
    ASSERT_TRUE(finished.wait_for(std::chrono::seconds(60)) == std::future_status::ready)
        << "alpha " << a << ": no return in 60 s";
    int zeros = 0, ones = 0;
    for (const double b : *draws) {
      ASSERT_TRUE(b >= 0 && b <= 1) << "alpha " << a << ": " << b;
      zeros += b == 0, ones += b == 1;
    }
    // Beta(a, a) puts half its mass at each end as a -> 0.
    EXPECT_EQ(zeros + ones, 400) << "alpha " << a;
    EXPECT_GT(zeros, 150) << "alpha " << a;
    EXPECT_GT(ones, 150) << "alpha " << a;
  }
}

// Mean 1/2 and variance 1 / (4 (2a + 1)) of Beta(a, a), for alphas whose gammas never underflow, sometimes do
// (1e-3: the draw then comes from their logs) and are at least 1 (no boost).
TEST(Mixup, BetaDrawsHaveTheMeanAndVarianceOfBetaAA) {
  for (const double a : {1e-3, 0.2, 1.0, 4.0}) {
    const int n = 40000;
    double sum = 0, squares = 0;
    for (int i = 0; i < n; ++i) {
      data::SampleRng rng(static_cast<uint64_t>(i));
      const double b = sample_beta(a, rng);
      sum += b, squares += b * b;
    }
    const double mean = sum / n, variance = squares / n - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.01) << "alpha " << a;
    EXPECT_NEAR(variance, 1.0 / (4.0 * (2.0 * a + 1.0)), 0.01) << "alpha " << a;
  }
}

// A tiny ImageFolder read as uint8 pixels (data.auto_augment's) or float32 ones, on the CPU.
std::shared_ptr<data::Dataset> dataset(const std::string& root, data::PixelFormat format) {
  data::TransformOptions t;
  t.size = 32;
  t.format = format;
  return std::make_shared<data::Dataset>(data::scan_image_folder(root, "train"), t, true, data::BadImagePolicy::kSkip);
}

struct Epoch {
  std::vector<at::Tensor> images, labels;
};

Epoch read_epoch(Feeder& f, int64_t epoch, int64_t first_batch = 0) {
  Epoch out;
  f.start_epoch(epoch, first_batch);
  while (auto b = f.next()) {
    EXPECT_EQ(b->epoch, epoch);
    out.images.push_back(b->images.clone());
    out.labels.push_back(b->labels.clone());
  }
  return out;
}

Feeder feeder(const std::shared_ptr<data::Dataset>& set, const AugmentOptions& augment, int workers) {
  data::LoaderOptions lo;
  lo.batch_size = 4;
  lo.workers = workers;
  lo.seed = 9;
  PipelineOptions po;
  po.transfer_dtype = set->transform().format == data::PixelFormat::kUint8Hwc ? TransferDtype::kUint8 : TransferDtype::kFloat32;
  return Feeder(set, lo, po, FeederOptions{}, augment);
}

TEST(Feeder, AResumedEpochReplaysTheAugmentedBatches) {
  const auto set = dataset(test::make_dataset("augment_resume", 3, 8, 0, 48), data::PixelFormat::kUint8Hwc);
  Feeder whole = feeder(set, every_augmentation(), 3);
  const Epoch first = read_epoch(whole, 1);
  ASSERT_EQ(first.images.size(), 6u);
  EXPECT_EQ(first.labels[0].sizes(), (c10::IntArrayRef{4, 3}));  // soft targets
  Feeder resumed = feeder(set, every_augmentation(), 1);  // another worker count, from batch 2
  const Epoch rest = read_epoch(resumed, 1, 2);
  ASSERT_EQ(rest.images.size(), 4u);
  for (size_t i = 0; i < rest.images.size(); ++i) {
    EXPECT_TRUE(at::equal(rest.images[i], first.images[i + 2])) << "batch " << i + 2;
    EXPECT_TRUE(at::equal(rest.labels[i], first.labels[i + 2])) << "batch " << i + 2;
  }
  Feeder plain = feeder(set, AugmentOptions{}, 2);  // the same batches unaugmented differ
  const Epoch unaugmented = read_epoch(plain, 1);
  int differ = 0;
  for (size_t i = 0; i < unaugmented.images.size(); ++i) differ += !at::equal(unaugmented.images[i], first.images[i]);
  EXPECT_GE(differ, 5);
}

TEST(Feeder, Float32PixelsGetErasingAndMixupButNoPolicy) {
  const auto set = dataset(test::make_dataset("augment_float", 3, 4, 0, 40), data::PixelFormat::kFloat32Chw);
  AugmentOptions o = every_augmentation();
  o.auto_augment = {};
  o.erasing_p = 1.0;
  Feeder f = feeder(set, o, 2);
  Feeder plain = feeder(set, AugmentOptions{}, 2);
  const Epoch a = read_epoch(f, 0), b = read_epoch(plain, 0);
  ASSERT_EQ(a.images.size(), b.images.size());
  for (size_t i = 0; i < a.images.size(); ++i) {
    EXPECT_EQ(a.images[i].scalar_type(), at::kFloat);
    EXPECT_EQ(a.labels[i].sizes(), (c10::IntArrayRef{4, 3}));
    EXPECT_FALSE(at::equal(a.images[i], b.images[i]));  // every image has a box
  }
}

}  // namespace
}  // namespace pinfeed::pipeline::augment
