#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>

#include "data/error.h"
#include "data/dataset/image_folder.h"
#include "pipeline/error_text.h"
#include "pipeline/transfer/feeder.h"
#include "pipeline/transfer/host_ring.h"
#include "pipeline/transfer/options.h"
#include "pipeline/timing/step_meter.h"
#include "test_util.h"

namespace pinfeed::pipeline {
namespace {

TEST(ErrorText, LibTorchErrorsLoseTheirStackFrames) {
  try {
    TORCH_CHECK(false, "the message");
  } catch (const std::exception& e) {
    const std::string text = error_text(e);
    EXPECT_NE(text.find("the message"), std::string::npos) << text;
    EXPECT_EQ(text.find("frame #"), std::string::npos) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  }
  EXPECT_EQ(error_text(std::runtime_error("plain")), "plain");
}

TEST(Modes, PresetsSetTheThreeFlags) {
  struct Expect { const char* name; bool pin, nb, dual; };
  const Expect expect[] = {{"pageable", false, false, false},
                           {"pinned", true, false, false},
                           {"non_blocking", false, true, false},
                           {"pinned_non_blocking", true, true, false},
                           {"dual_stream", true, true, true}};
  ASSERT_EQ(mode_presets().size(), 5u);
  for (const auto& e : expect) {
    const ModePreset* p = find_preset(e.name);
    ASSERT_NE(p, nullptr) << e.name;
    PipelineOptions o;
    apply_preset(*p, o);
    EXPECT_EQ(o.pin_memory, e.pin) << e.name;
    EXPECT_EQ(o.non_blocking, e.nb) << e.name;
    EXPECT_EQ(o.dual_stream, e.dual) << e.name;
    EXPECT_EQ(o.mode, p->mode) << e.name;
    EXPECT_EQ(mode_name(o), e.name);
    EXPECT_FALSE(check_options(o, /*device_is_cuda=*/true)) << e.name;
  }
  EXPECT_EQ(find_preset("turbo"), nullptr);
}

TEST(Modes, CpuAcceptsOnlyPageable) {
  for (const auto& p : mode_presets()) {
    PipelineOptions o;
    apply_preset(p, o);
    EXPECT_EQ(!check_options(o, false), std::string(p.name) == "pageable") << p.name;
  }
  PipelineOptions o;
  o.pin_memory = true;
  EXPECT_EQ(check_options(o, false).key, "pipeline.pin_memory");
}

TEST(Modes, ImpossibleCombinationsNameTheFlag) {
  PipelineOptions o;
  o.dual_stream = true;
  o.non_blocking = true;
  EXPECT_NE(check_options(o, true).message.find("needs pipeline.pin_memory = true"), std::string::npos);
  EXPECT_EQ(check_options(o, true).key, "pipeline.dual_stream");
  o.pin_memory = true;
  o.non_blocking = false;
  EXPECT_NE(check_options(o, true).message.find("needs pipeline.non_blocking = true"), std::string::npos);
  PipelineOptions custom;
  custom.pin_memory = true;
  custom.dual_stream = false;
  custom.non_blocking = false;
  EXPECT_EQ(mode_name(custom), "pinned");
}

class FakeFence : public data::Fence {
 public:
  bool ready() override { return done; }
  void wait() override { done = true; waited = true; }
  bool done = false, waited = false;
};

TEST(HostRing, SlotIsNotReusedBeforeItsFenceIsReady) {
  HostRing ring(2, 4, {3, 8, 8}, c10::kFloat, /*pinned=*/false);
  EXPECT_EQ(ring.bytes(), 2 * (4 * 3 * 8 * 8 * 4 + 4 * 8));
  auto a = ring.try_acquire(), b = ring.try_acquire();
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(ring.try_acquire());
  auto fence_a = std::make_shared<FakeFence>();
  ring.release(*a, fence_a);
  EXPECT_FALSE(ring.try_acquire()) << "handed out while its copy is still running";
  fence_a->done = true;
  EXPECT_EQ(ring.try_acquire(), a);
}

TEST(HostRing, FencedSlotsAreReusedOldestFirstAndAcquireWaits) {
  HostRing ring(3, 1, {4}, c10::kByte, false);
  auto a = *ring.try_acquire(), b = *ring.try_acquire(), c = *ring.try_acquire();
  auto fa = std::make_shared<FakeFence>(), fb = std::make_shared<FakeFence>();
  ring.release(b, fb);
  ring.release(a, fa);
  ring.release(c, nullptr);
  EXPECT_EQ(ring.try_acquire(), c);  // no fence: free at once
  fa->done = true;
  EXPECT_EQ(ring.try_acquire(), a);  // ready, although released after b
  EXPECT_EQ(ring.acquire(), b);      // waits on b's fence
  EXPECT_TRUE(fb->waited);
  EXPECT_FALSE(ring.acquire());      // every slot is out: nothing to wait for
}

TEST(Feeder, FallsBackToPageableWhenThePinnedBudgetIsTooSmall) {
  const std::string root = test::make_dataset("feeder_budget", 2, 4, 1, 32);
  data::TransformOptions t;
  t.size = 224;
  auto ds = std::make_shared<data::Dataset>(data::scan_image_folder(root, "train"), t, true, data::BadImagePolicy::kSkip);
  data::LoaderOptions lo;
  lo.batch_size = 8;  // 8 x 224 x 224 x 3 x 4 B = 4.8 MB per slot, 6 slots
  lo.workers = 1;
  PipelineOptions po;
  apply_preset(*find_preset("dual_stream"), po);
  po.pinned_budget_mb = 1;
  FeederOptions fo;
  fo.device = c10::Device(c10::kCUDA, 0);  // never touched: the fallback happens before any CUDA call
  fo.compute_stream = c10::Stream(c10::Stream::DEFAULT, fo.device);  // a handle only, never used here
  Feeder feeder(ds, lo, po, fo);
  EXPECT_EQ(feeder.mode(), "pageable");
  EXPECT_EQ(feeder.pinned_bytes(), 0);
  EXPECT_FALSE(feeder.options().pin_memory);
}

TEST(Feeder, CpuDeliversNormalisedBatchesInEitherTransferDtype) {
  const std::string root = test::make_dataset("feeder_cpu", 2, 4, 1, 32);
  for (auto dtype : {TransferDtype::kFloat32, TransferDtype::kUint8}) {
    data::TransformOptions t;
    t.size = 16;
    t.format = dtype == TransferDtype::kUint8 ? data::PixelFormat::kUint8Hwc : data::PixelFormat::kFloat32Chw;
    auto ds = std::make_shared<data::Dataset>(data::scan_image_folder(root, "train"), t, true, data::BadImagePolicy::kSkip);
    data::LoaderOptions lo;
    lo.batch_size = 4;
    lo.workers = 2;
    PipelineOptions po;
    po.transfer_dtype = dtype;
    Feeder feeder(ds, lo, po, FeederOptions{});
    feeder.start_epoch(0);
    auto b = feeder.next();
    ASSERT_TRUE(b);
    EXPECT_EQ(b->images.sizes(), (std::vector<int64_t>{4, 3, 16, 16}));
    EXPECT_EQ(b->images.scalar_type(), c10::kFloat);
    EXPECT_EQ(b->timing.h2d_end, nullptr);
    const double mean = b->images.mean().item<double>();
    EXPECT_GT(mean, -2.5);
    EXPECT_LT(mean, 2.5);
  }
}

// model.pad_input: uint8 pixels become float16 RGB and a zero fourth channel, the float32 batch's values rounded.
TEST(Feeder, Uint8PixelsBecomeFloat16WithAZeroFourthChannel) {
  const std::string root = test::make_dataset("feeder_pad", 2, 4, 1, 32);
  data::TransformOptions t;
  t.size = 16;
  t.format = data::PixelFormat::kUint8Hwc;
  auto ds = std::make_shared<data::Dataset>(data::scan_image_folder(root, "train"), t, true, data::BadImagePolicy::kSkip);
  data::LoaderOptions lo;
  lo.batch_size = 4;
  lo.workers = 2;
  PipelineOptions po;
  po.transfer_dtype = TransferDtype::kUint8;
  std::vector<at::Tensor> batches;
  for (bool pad : {false, true}) {
    FeederOptions fo;
    fo.channels_last = true;
    if (pad) {
      fo.input_dtype = at::kHalf;
      fo.input_channels = 4;
    }
    Feeder feeder(ds, lo, po, fo);
    feeder.start_epoch(0);
    auto b = feeder.next();
    ASSERT_TRUE(b);
    batches.push_back(b->images.clone());
  }
  const at::Tensor& padded = batches[1];
  EXPECT_EQ(padded.sizes(), (std::vector<int64_t>{4, 4, 16, 16}));
  EXPECT_EQ(padded.scalar_type(), at::kHalf);
  EXPECT_TRUE(padded.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(padded.narrow(1, 0, 3).equal(batches[0].to(at::kHalf)));
  EXPECT_EQ(padded.select(1, 3).abs().sum().item<float>(), 0.f);
}

// A CPU Feeder (mode pageable) over a dataset whose sample `stuck` blocks at the gate, as a read that never returns.
struct StuckFeed {
  explicit StuckFeed(const std::string& name) {
    const std::string root = test::make_dataset(name, 2, 6, 1, 32);
    data::TransformOptions t;
    t.size = 16;
    dataset = std::make_shared<data::Dataset>(data::scan_image_folder(root, "train"), t, true,
                                              data::BadImagePolicy::kSkip);
    loader.batch_size = 2;
    loader.workers = 2;
    loader.before_load = [gate = gate, stuck = stuck](int64_t sample) {
      if (sample == stuck) gate->wait();
    };
  }
  const int64_t stuck = 5;
  std::shared_ptr<test::Gate> gate = std::make_shared<test::Gate>();
  test::OpenAtExit release{gate};
  std::shared_ptr<data::Dataset> dataset;
  data::LoaderOptions loader;
};

TEST(Feeder, AStuckSampleReachesTheTrainingThreadAsStuckSample) {
  StuckFeed feed("feeder_stuck");
  feed.loader.sample_timeout_s = 0.3;
  const std::string path = feed.dataset->folder().samples[feed.stuck].path;
  {
    Feeder feeder(feed.dataset, feed.loader, PipelineOptions{}, FeederOptions{});
    feeder.start_epoch(0);
    const std::string error = test::message_of<data::StuckSample>([&] {
      while (feeder.next()) {
      }
    });
    EXPECT_NE(error.find("a worker is still loading " + path + " (data.sample_timeout_s = 0.3)"), std::string::npos)
        << error;
  }  // destroyed with the worker still stuck: must return
  feed.gate->open();
  EXPECT_TRUE(test::eventually([&] { return feed.dataset.use_count() == 1; })) << "the stuck worker never ended";
}

TEST(Feeder, AStopRequestedEndsAWaitingNextWithInterrupted) {
  StuckFeed feed("feeder_interrupted");
  auto stop = std::make_shared<std::atomic<bool>>(false);
  feed.loader.stop_requested = [stop] { return stop->load(); };
  feed.loader.before_load = [gate = feed.gate, stuck = feed.stuck, stop](int64_t sample) {
    if (sample != stuck) return;
    *stop = true;  // Ctrl-C while this worker is stuck
    gate->wait();
  };
  Feeder feeder(feed.dataset, feed.loader, PipelineOptions{}, FeederOptions{});
  feeder.start_epoch(0);
  EXPECT_THROW(
      {
        while (feeder.next()) {
        }
      },
      data::Interrupted);
  feed.gate->open();
}

TEST(StepMeter, IdleFractionFromHandMadeSpans) {
  EXPECT_TRUE(std::isnan(idle_fraction({})));
  EXPECT_DOUBLE_EQ(idle_fraction({{0, 10}, {10, 20}}), 0.0);
  EXPECT_DOUBLE_EQ(idle_fraction({{0, 10}, {20, 30}}), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(idle_fraction({{5, 6}, {8, 9}, {14, 15}}), 0.7);
}

TEST(StepMeter, PercentilesInterpolateAndIgnoreNotApplicable) {
  const Summary s = summarize({4, 1, 3, 2, kNotApplicable});
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.p50, 2.5);
  EXPECT_DOUBLE_EQ(s.p95, 3.85);
  EXPECT_TRUE(std::isnan(summarize({}).mean));
}

TEST(SlotLayout, LabelsFollowTheImagesAlignedAndDoNotOverlap) {
  const SlotLayout odd(3, {5, 5, 3}, c10::kByte);  // 225 image bytes: the labels start at 232
  EXPECT_EQ(odd.image_bytes, 3 * 75);
  EXPECT_EQ(odd.labels_offset, 232);
  EXPECT_EQ(odd.bytes, 232 + 3 * 8);
  HostRing ring(2, 3, {5, 5, 3}, c10::kByte, /*pinned=*/false);
  EXPECT_EQ(ring.bytes(), ring_bytes(2, 3, 75));
  const data::BatchMemory m = ring.memory(1);
  EXPECT_EQ(m.images, ring.images(1).data_ptr());
  EXPECT_EQ(m.labels, ring.labels(1).data_ptr<int64_t>());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m.labels) % 8, 0u);
  ring.images(1).fill_(255);
  for (int i = 0; i < 3; ++i) m.labels[i] = 100 + i;
  EXPECT_EQ(ring.images(1).sum().item<int64_t>(), 255 * 225) << "labels overwrote image bytes";
  EXPECT_EQ(ring.labels(1)[2].item<int64_t>(), 102);
  EXPECT_EQ(ring.images(1).sizes(), (std::vector<int64_t>{3, 5, 5, 3}));
}

TEST(EventPool, ReusesEventsOnceReleased) {
  gpu::EventPool pool;
  {
    auto a = pool.get(), b = pool.get();
    EXPECT_NE(a.get(), b.get());
  }
  for (int i = 0; i < 10; ++i) {
    auto a = pool.get(), b = pool.get();
  }
  EXPECT_EQ(pool.created(), 2);
  std::shared_ptr<gpu::Event> outlives;
  {
    gpu::EventPool short_lived;
    outlives = short_lived.get();
  }
  outlives.reset();  // returns to a pool whose owner is gone: must not crash
}

TEST(StepMeter, CpuReportsGpuFiguresAsNotApplicableAndExcludesWarmup) {
  StepMeter meter(std::nullopt);
  meter.start_epoch(2);
  for (int i = 0; i < 5; ++i) {
    meter.begin_step();
    EXPECT_EQ(meter.hold_back(2), 0);  // nothing to wait for on the CPU
    FeedTiming feed;
    feed.wait_ms = i;
    feed.loader_ms = i / 2.0;
    meter.end_step(8, feed);
  }
  const EpochTiming t = meter.finish_epoch();
  EXPECT_EQ(t.warmup_steps, 2);
  EXPECT_EQ(t.steps, 3);
  EXPECT_EQ(t.samples, 24);
  EXPECT_DOUBLE_EQ(t.wait_ms.mean, 3.0);  // steps 2, 3, 4
  EXPECT_DOUBLE_EQ(t.loader_ms.mean, 1.5);
  EXPECT_TRUE(std::isnan(t.ahead_ms.mean));
  EXPECT_TRUE(std::isnan(t.gpu_idle));
  EXPECT_TRUE(std::isnan(t.h2d_ms.mean));
  EXPECT_GT(t.samples_per_s, 0);
}

}  // namespace
}  // namespace pinfeed::pipeline
