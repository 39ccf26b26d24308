// GPU tests (ctest label "gpu"): skipped, not failed, where no CUDA device is present.
#include <gtest/gtest.h>

#include <ATen/ops/equal.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "data/error.h"
#include "data/dataset/image_folder.h"
#include "pipeline/transfer/feeder.h"
#include "pipeline/timing/step_meter.h"
#include "test_util.h"

namespace pinfeed::pipeline {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device"

const c10::Device kCuda(c10::kCUDA, 0);

std::shared_ptr<data::Dataset> dataset(const std::string& root, TransferDtype dtype, int size = 32) {
  data::TransformOptions t;
  t.size = size;
  t.format = dtype == TransferDtype::kUint8 ? data::PixelFormat::kUint8Hwc : data::PixelFormat::kFloat32Chw;
  return std::make_shared<data::Dataset>(data::scan_image_folder(root, "train"), t, true, data::BadImagePolicy::kSkip);
}

PipelineOptions mode(const std::string& name, TransferDtype dtype) {
  PipelineOptions o;
  apply_preset(*find_preset(name), o);
  o.transfer_dtype = dtype;
  return o;
}

data::LoaderOptions loader(int64_t batch_size, int workers, uint64_t seed = 0) {
  data::LoaderOptions lo;
  lo.batch_size = batch_size;
  lo.workers = workers;
  lo.seed = seed;
  return lo;
}

FeederOptions on_cuda() {
  FeederOptions fo;
  fo.device = kCuda;
  fo.compute_stream = gpu::current_stream(kCuda);
  return fo;
}

std::vector<at::Tensor> epoch_on_host(Feeder& f, int64_t epoch) {
  std::vector<at::Tensor> out;
  f.start_epoch(epoch);
  while (auto b = f.next()) {
    out.push_back(b->images.cpu());
    out.push_back(b->labels.cpu());
  }
  return out;
}

TEST(GpuPipeline, EveryModeDeliversByteIdenticalBatches) {
  SKIP_WITHOUT_CUDA();
  const std::string root = test::make_dataset("gpu_identical", 3, 16, 1, 48);
  for (auto dtype : {TransferDtype::kFloat32, TransferDtype::kUint8}) {
    auto ds = dataset(root, dtype);
    const auto lo = loader(8, 3, 5);
    const auto fo = on_cuda();
    Feeder base(ds, lo, mode("pageable", dtype), fo);
    const auto expect = epoch_on_host(base, 1);
    for (const auto& p : mode_presets()) {
      Feeder f(ds, lo, mode(p.name, dtype), fo);
      EXPECT_EQ(f.mode(), p.name);
      const auto got = epoch_on_host(f, 1);
      ASSERT_EQ(got.size(), expect.size()) << p.name;
      for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], expect[i])) << p.name << " tensor " << i;
    }
  }
}

TEST(GpuPipeline, PinnedBuffersArePageLockedAndSizedExactly) {
  SKIP_WITHOUT_CUDA();
  const std::string root = test::make_dataset("gpu_pinned", 2, 8, 1, 32);
  auto ds = dataset(root, TransferDtype::kUint8);
  auto lo = loader(4, 2);
  lo.prefetch_batches = 2;
  const auto fo = on_cuda();
  Feeder f(ds, lo, mode("dual_stream", TransferDtype::kUint8), fo);
  EXPECT_TRUE(f.ring().images(0).is_pinned());
  EXPECT_TRUE(f.ring().labels(0).is_pinned());
  EXPECT_EQ(f.pinned_bytes(), 4 * (4 * 32 * 32 * 3 + 4 * 8));  // ring depth x batch bytes
  Feeder pageable(ds, lo, mode("pageable", TransferDtype::kUint8), fo);
  EXPECT_FALSE(pageable.ring().images(0).is_pinned());
}

TEST(GpuPipeline, DualStreamStressFindsNoChecksumMismatch) {
  SKIP_WITHOUT_CUDA();
  const std::string root = test::make_dataset("gpu_stress", 2, 32, 1, 40);
  auto ds = dataset(root, TransferDtype::kFloat32);
  data::LoaderOptions lo;
  lo.batch_size = 8;
  lo.workers = 4;
  lo.prefetch_batches = 1;  // a 3-slot ring: a slot reused too early would show at once
  const int64_t steps = 1000, per_epoch = 64 / 8;
  const int64_t epochs = (steps + per_epoch - 1) / per_epoch;

  std::vector<double> expect;  // checksums from the CPU path
  {
    Feeder cpu(ds, lo, PipelineOptions{}, FeederOptions{});
    for (int64_t e = 0; e < epochs; ++e) {
      cpu.start_epoch(e);
      while (auto b = cpu.next()) expect.push_back(b->images.to(c10::kDouble).sum().item<double>());
    }
  }
  Feeder f(ds, lo, mode("dual_stream", TransferDtype::kFloat32), on_cuda());
  at::Tensor sums = at::zeros({steps}, at::TensorOptions().device(kCuda).dtype(c10::kDouble));
  const at::Tensor a = at::randn({1024, 1024}, at::TensorOptions().device(kCuda));
  int64_t step = 0;
  for (int64_t e = 0; e < epochs && step < steps; ++e) {
    f.start_epoch(e);
    while (step < steps) {
      auto b = f.next();
      if (!b) break;
      at::Tensor busy = a;
      for (int k = 0; k < 4; ++k) busy = busy.mm(a);  // compute that outlasts the copy
      sums[step++] = b->images.to(c10::kDouble).sum().add(busy.sum().mul(0));
    }
  }
  const at::Tensor got = sums.cpu();
  int64_t mismatches = 0;
  for (int64_t i = 0; i < steps; ++i) {
    if (std::abs(got[i].item<double>() - expect[i]) > 1e-6 * std::abs(expect[i]) + 1e-6) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(GpuPipeline, InjectedHostDelayYieldsTheIdleFractionOfTheMeasuredGaps) {
  SKIP_WITHOUT_CUDA();
  const c10::Stream stream = gpu::current_stream(kCuda);
  const at::Tensor a = at::randn({4096, 4096}, at::TensorOptions().device(kCuda));
  for (int i = 0; i < 3; ++i) a.mm(a);  // warm up cuBLAS
  gpu::synchronize(stream);
  const int warmup = 2, steps = 40;
  StepMeter meter(stream);
  meter.start_epoch(warmup);
  // Our own events, apart from the meter's: when each measured step's GPU work began and ended. The idle
  // fraction they give is what the meter must report, whatever the sleep really lasted on a busy host.
  std::vector<std::shared_ptr<gpu::Event>> began, ended;
  for (int i = 0; i < steps; ++i) {
    meter.begin_step();
    if (i >= warmup) {
      began.push_back(std::make_shared<gpu::Event>());
      began.back()->record(stream);
    }
    at::Tensor x = a;
    for (int k = 0; k < 8; ++k) x = x.mm(a).div_(4096);
    if (i >= warmup) {
      ended.push_back(std::make_shared<gpu::Event>());
      ended.back()->record(stream);
    }
    meter.end_step(1, {});
    gpu::synchronize(stream);  // the GPU drains, then the host "loads data" for about 4 ms
    std::this_thread::sleep_for(std::chrono::milliseconds(4));
  }
  const EpochTiming t = meter.finish_epoch();
  double gaps = 0;
  for (size_t i = 1; i < began.size(); ++i) gaps += ended[i - 1]->elapsed_ms(*began[i]);
  const double window = began.front()->elapsed_ms(*ended.back());
  const double measured = gaps / window;
  EXPECT_GT(measured, 0.05) << "the injected delay must show: the test would prove nothing";
  EXPECT_NEAR(t.gpu_idle, measured, 0.01) << "compute " << t.compute_ms.mean << " ms";
}

TEST(GpuPipeline, HoldBackKeepsTheHostAtMostMaxAheadSteps) {
  SKIP_WITHOUT_CUDA();
  const c10::Stream stream = gpu::current_stream(kCuda);
  const at::Tensor a = at::randn({4096, 4096}, at::TensorOptions().device(kCuda));
  a.mm(a);
  gpu::synchronize(stream);
  StepMeter meter(stream);
  meter.start_epoch(0);
  std::vector<std::shared_ptr<gpu::Event>> step_end;
  double held = 0;
  for (int i = 0; i < 12; ++i) {
    held += meter.hold_back(2);
    if (i >= 2) {
      EXPECT_TRUE(step_end[i - 2]->query()) << "step " << i << " started 3 steps ahead";
    }
    meter.begin_step();
    at::Tensor x = a;
    for (int k = 0; k < 8; ++k) x = x.mm(a).div_(4096);  // a few ms of GPU work, microseconds of host work
    step_end.push_back(std::make_shared<gpu::Event>());  // before the meter's own end event in the stream
    step_end.back()->record(stream);
    meter.end_step(1, {});
  }
  const EpochTiming t = meter.finish_epoch();
  EXPECT_GT(held, 0) << "the host never got ahead: the GPU steps are too short to test this";
  EXPECT_NEAR(t.ahead_ms.mean * t.steps, held, 1e-6);
  EXPECT_LT(t.gpu_idle, 0.05) << "holding back two steps must not starve the GPU";
}

// The copier carries on into the next epoch at an epoch's end; every way of starting an epoch afterwards (the
// next one, after a pause that lets the copier run ahead; the same one again; one mid-way, as resume does; one
// abandoned part-way) must still hand out exactly the pageable path's batches.
TEST(GpuPipeline, DualStreamCarriesOnIntoTheNextEpochAndStillDeliversEachEpochsBatches) {
  SKIP_WITHOUT_CUDA();
  const std::string root = test::make_dataset("gpu_carry_on", 2, 12, 1, 32);
  auto ds = dataset(root, TransferDtype::kUint8);
  const auto lo = loader(4, 3, 11);
  const auto fo = on_cuda();
  Feeder base(ds, lo, mode("pageable", TransferDtype::kUint8), fo);
  Feeder f(ds, lo, mode("dual_stream", TransferDtype::kUint8), fo);
  struct Start {
    int64_t epoch, first_batch, take;  // take: batches to read (-1: to the end)
    bool pause;                        // give the copier time to run into this epoch first
  };
  const std::vector<Start> starts = {{0, 0, -1, false}, {1, 0, -1, true}, {2, 0, -1, false}, {2, 0, 2, false},
                                     {2, 3, -1, true},  {3, 0, -1, true}, {4, 0, 1, true},   {5, 0, -1, false}};
  for (const Start& s : starts) {
    base.start_epoch(s.epoch, s.first_batch);
    if (s.pause) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    f.start_epoch(s.epoch, s.first_batch);
    for (int64_t i = 0; s.take < 0 || i < s.take; ++i) {
      auto want = base.next();
      auto got = f.next();
      ASSERT_EQ(want.has_value(), got.has_value()) << "epoch " << s.epoch << " batch " << i;
      if (!want) break;
      EXPECT_EQ(got->index, want->index);
      EXPECT_TRUE(at::equal(got->images.cpu(), want->images.cpu())) << "epoch " << s.epoch << " batch " << i;
      EXPECT_TRUE(at::equal(got->labels.cpu(), want->labels.cpu())) << "epoch " << s.epoch << " batch " << i;
    }
    if (s.take < 0) {
      EXPECT_FALSE(f.next()) << "past epoch " << s.epoch << "'s end";
    }
  }
}

TEST(GpuPipeline, DualStreamCopierSurvivesAbandonedEpochsAndPassesOnWorkerErrors) {
  SKIP_WITHOUT_CUDA();
  const std::string root = test::make_dataset("gpu_copier", 2, 12, 1, 32);
  auto ds = dataset(root, TransferDtype::kUint8);
  const auto lo = loader(4, 3, 9);
  const auto fo = on_cuda();
  Feeder base(ds, lo, mode("pageable", TransferDtype::kUint8), fo);
  const auto expect = epoch_on_host(base, 2);
  {
    Feeder f(ds, lo, mode("dual_stream", TransferDtype::kUint8), fo);
    EXPECT_FALSE(f.next()) << "no epoch started yet";
    f.start_epoch(0);
    ASSERT_TRUE(f.next());
    f.start_epoch(1);  // abandoned with batches copied and in flight
    ASSERT_TRUE(f.next());
    const auto got = epoch_on_host(f, 2);
    ASSERT_EQ(got.size(), expect.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], expect[i])) << "tensor " << i;
    EXPECT_FALSE(f.next()) << "past the epoch's end";
    f.start_epoch(3);
    ASSERT_TRUE(f.next());
  }  // destroyed mid-epoch: must not hang

  auto failing = std::make_shared<data::Dataset>(data::scan_image_folder(root, "train"), ds->transform(), true,
                                                 data::BadImagePolicy::kFail);
  const std::string bad = failing->folder().samples[3].path;
  { std::ofstream(bad, std::ios::trunc) << "garbage"; }
  Feeder f(failing, lo, mode("dual_stream", TransferDtype::kUint8), fo);
  f.start_epoch(0);
  try {
    while (f.next()) {
    }
    FAIL() << "expected the worker's error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
}

// dual_stream: the copier thread waits in loader.next() on a worker stuck on sample `stuck` (a read that never
// returns) while the training thread waits in next() for the copier.
data::LoaderOptions stuck_on(int64_t stuck, const std::shared_ptr<test::Gate>& gate) {
  data::LoaderOptions lo = loader(2, 2);
  lo.before_load = [gate, stuck](int64_t sample) {
    if (sample == stuck) gate->wait();
  };
  return lo;
}

TEST(GpuPipeline, DualStreamPassesAStuckSampleToTheTrainingThread) {
  SKIP_WITHOUT_CUDA();
  auto ds = dataset(test::make_dataset("gpu_stuck", 2, 6, 1, 32), TransferDtype::kUint8);
  const int64_t stuck = 5;
  auto gate = std::make_shared<test::Gate>();
  test::OpenAtExit release{gate};
  data::LoaderOptions lo = stuck_on(stuck, gate);
  lo.sample_timeout_s = 0.3;
  {
    Feeder f(ds, lo, mode("dual_stream", TransferDtype::kUint8), on_cuda());
    f.start_epoch(0);
    const std::string error = test::message_of<data::StuckSample>([&] {
      while (f.next()) {
      }
    });
    EXPECT_NE(error.find("a worker is still loading " + ds->folder().samples[stuck].path), std::string::npos) << error;
  }  // destroyed with the worker still stuck: the copier and the loader must return
  gate->open();
  EXPECT_TRUE(test::eventually([&] { return ds.use_count() == 1; })) << "the stuck worker never ended";
}

TEST(GpuPipeline, DualStreamEndsAWaitOnAStuckWorkerWhenAStopIsRequested) {
  SKIP_WITHOUT_CUDA();
  auto ds = dataset(test::make_dataset("gpu_interrupted", 2, 6, 1, 32), TransferDtype::kUint8);
  const int64_t stuck = 5;
  auto gate = std::make_shared<test::Gate>();
  test::OpenAtExit release{gate};
  auto stop = std::make_shared<std::atomic<bool>>(false);
  data::LoaderOptions lo = stuck_on(stuck, gate);  // no sample_timeout_s: only the stop can end the wait
  lo.stop_requested = [stop] { return stop->load(); };
  lo.before_load = [gate, stop, stuck](int64_t sample) {
    if (sample != stuck) return;
    *stop = true;  // Ctrl-C while this worker is stuck
    gate->wait();
  };
  Feeder f(ds, lo, mode("dual_stream", TransferDtype::kUint8), on_cuda());
  f.start_epoch(0);
  EXPECT_THROW(
      {
        while (f.next()) {
        }
      },
      data::Interrupted);
  gate->open();
}

}  // namespace
}  // namespace pinfeed::pipeline
