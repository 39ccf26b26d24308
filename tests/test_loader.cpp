#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <set>

#include "data/loader/detached.h"
#include "data/error.h"
#include "data/loader/loader.h"
#include "host_arena.h"
#include "test_util.h"

namespace pinfeed::data {
namespace {

std::shared_ptr<Dataset> open(const std::string& root, BadImagePolicy policy = BadImagePolicy::kSkip) {
  TransformOptions t;
  t.size = 16;
  t.format = PixelFormat::kUint8Hwc;
  return std::make_shared<Dataset>(scan_image_folder(root, "train"), t, true, policy);
}

LoaderOptions options(int64_t batch_size, int workers) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.workers = workers;
  return o;
}

// Every batch of one epoch, copied out: (labels, pixels) per batch.
std::vector<std::pair<std::vector<int64_t>, std::vector<uint8_t>>> epoch_batches(std::shared_ptr<Dataset> ds,
                                                                                 LoaderOptions o, int64_t epoch) {
  test::HostArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
  Loader loader(ds, o, &arena);
  loader.start_epoch(epoch);
  std::vector<std::pair<std::vector<int64_t>, std::vector<uint8_t>>> out;
  int64_t expect_index = 0;
  while (auto b = loader.next()) {
    EXPECT_EQ(b->index, expect_index++);
    const auto* px = static_cast<const uint8_t*>(b->memory.images);
    out.emplace_back(std::vector<int64_t>(b->memory.labels, b->memory.labels + b->size),
                     std::vector<uint8_t>(px, px + b->size * ds->image_bytes()));
    loader.recycle(*b);
  }
  return out;
}

class LoaderWorkers : public ::testing::TestWithParam<int> {};

TEST_P(LoaderWorkers, BatchesAreIdenticalWhateverTheWorkerCount) {
  static const std::string root = test::make_dataset("loader_workers", 3, 10, 1, 24);
  auto ds = open(root);
  LoaderOptions one;
  one.batch_size = 4;
  one.workers = 1;
  one.seed = 9;
  LoaderOptions many = one;
  many.workers = GetParam();
  many.prefetch_batches = GetParam();
  EXPECT_EQ(epoch_batches(ds, one, 2), epoch_batches(ds, many, 2));
}

INSTANTIATE_TEST_SUITE_P(Counts, LoaderWorkers, ::testing::Values(2, 3, 7));

TEST(Loader, VisitsEverySampleExactlyOncePerEpoch) {
  const std::string root = test::make_dataset("loader_once", 4, 6, 1, 24);
  auto ds = open(root);
  LoaderOptions o = options(5, 3);
  o.drop_last = false;
  o.shuffle = true;
  test::HostArena arena(4, o.batch_size, ds->image_bytes());
  Loader loader(ds, o, &arena);
  std::vector<int64_t> first_order;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {  // the pool survives across epochs
    loader.start_epoch(epoch);
    int64_t seen = 0;
    std::multiset<int64_t> labels;
    while (auto b = loader.next()) {
      seen += b->size;
      for (int64_t i = 0; i < b->size; ++i) labels.insert(b->memory.labels[i]);
      if (epoch == 0) first_order.push_back(b->memory.labels[0]);
      loader.recycle(*b);
    }
    EXPECT_EQ(seen, 24);
    for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(labels.count(c), 6u);
  }
}

TEST(Loader, OpensTheNextEpochsFirstBatchesOnceTheEpochIsUnderWayAndKeepsThem) {
  const std::string root = test::make_dataset("loader_ahead", 2, 10, 1, 24);
  auto ds = open(root);
  LoaderOptions o = options(4, 2);  // 5 batches an epoch
  o.prefetch_batches = 2;
  o.seed = 3;
  test::HostArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
  Loader loader(ds, o, &arena);
  auto drain = [&](int64_t epoch) {
    std::vector<std::pair<std::vector<int64_t>, std::vector<uint8_t>>> out;
    loader.start_epoch(epoch);
    while (auto b = loader.next()) {
      const auto* px = static_cast<const uint8_t*>(b->memory.images);
      out.emplace_back(std::vector<int64_t>(b->memory.labels, b->memory.labels + b->size),
                       std::vector<uint8_t>(px, px + b->size * ds->image_bytes()));
      loader.recycle(*b);
    }
    return out;
  };
  EXPECT_EQ(drain(0), epoch_batches(ds, o, 0));
  // Epoch 0's 5 batches, then epoch 1's first 2 opened before anyone asked for epoch 1.
  EXPECT_EQ(arena.acquired(), 5 + o.prefetch_batches);
  EXPECT_EQ(drain(1), epoch_batches(ds, o, 1)) << "the batches opened early are epoch 1's, in order";
  EXPECT_EQ(arena.acquired(), 10 + o.prefetch_batches) << "kept, not decoded again";
  EXPECT_EQ(drain(4), epoch_batches(ds, o, 4)) << "another epoch than the next: the early batches are dropped";
  o.continue_into_next_epoch = false;
  test::HostArena plain(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
  Loader off(ds, o, &plain);
  off.start_epoch(0);
  while (auto b = off.next()) off.recycle(*b);
  EXPECT_EQ(plain.acquired(), 5);
}

TEST(Loader, ReshufflesEachEpochFromTheSeed) {
  const std::string root = test::make_dataset("loader_shuffle", 4, 8, 1, 24);
  auto ds = open(root);
  LoaderOptions o = options(8, 2);
  o.seed = 1;
  const auto e0 = epoch_batches(ds, o, 0), e1 = epoch_batches(ds, o, 1);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, epoch_batches(ds, o, 0));
}

TEST(Loader, DropLastDropsOnlyTheFinalPartialBatch) {
  const std::string root = test::make_dataset("loader_droplast", 1, 10, 1, 24);
  auto ds = open(root);
  LoaderOptions o = options(4, 2);
  EXPECT_EQ(epoch_batches(ds, o, 0).size(), 2u);
  o.drop_last = false;
  const auto all = epoch_batches(ds, o, 0);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all.back().first.size(), 2u);
}

TEST(Loader, StartsMidEpochAtTheRequestedBatch) {
  const std::string root = test::make_dataset("loader_resume", 2, 8, 1, 24);
  auto ds = open(root);
  LoaderOptions o = options(4, 2);
  const auto all = epoch_batches(ds, o, 3);
  test::HostArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
  Loader loader(ds, o, &arena);
  loader.start_epoch(3, 2);
  auto b = loader.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->index, 2);
  EXPECT_EQ(std::vector<int64_t>(b->memory.labels, b->memory.labels + b->size), all[2].first);
}

TEST(Loader, WorkerExceptionReachesTheConsumerWithThePath) {
  const std::string root = test::make_dataset("loader_error", 2, 4, 1, 24);
  auto ds = open(root, BadImagePolicy::kFail);
  const std::string bad = ds->folder().samples[5].path;
  { std::ofstream(bad, std::ios::trunc) << "garbage"; }
  LoaderOptions o = options(2, 3);
  test::HostArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
  Loader loader(ds, o, &arena);
  loader.start_epoch(0);
  try {
    while (auto b = loader.next()) loader.recycle(*b);
    FAIL() << "expected the worker's error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  loader.start_epoch(1);  // the pool is still alive and usable afterwards
}

TEST(Loader, CorruptImagesAreReplacedAndCounted) {
  const std::string root = test::make_dataset("loader_corrupt", 2, 6, 1, 24);
  auto ds = open(root, BadImagePolicy::kSkip);
  for (int i : {0, 7}) {
    auto path = ds->folder().samples[i].path;
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(path, std::ios::trunc | std::ios::binary) << bytes.substr(0, bytes.size() / 2);  // truncated
  }
  LoaderOptions o = options(4, 2);
  test::HostArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
  Loader loader(ds, o, &arena);
  loader.start_epoch(0);
  int bad = 0, batches = 0;
  while (auto b = loader.next()) {
    bad += b->bad_images;
    ++batches;
    loader.recycle(*b);
  }
  EXPECT_EQ(batches, 3);
  EXPECT_EQ(bad, 2);
  EXPECT_EQ(ds->distinct_bad_images(), 2);
}

TEST(Loader, BadFilesAreRecordedOnceAcrossEpochsWhileBatchesCountEveryLoad) {
  const std::string root = test::make_dataset("loader_bad_epochs", 2, 6, 1, 24);
  auto ds = open(root, BadImagePolicy::kSkip);
  const std::string bad_path = ds->folder().samples[3].path;
  std::ofstream(bad_path, std::ios::trunc | std::ios::binary) << "not an image";
  LoaderOptions o = options(4, 2);
  test::HostArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
  Loader loader(ds, o, &arena);
  int bad_loads = 0;
  std::vector<BadImage> taken;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    loader.start_epoch(epoch);
    while (auto b = loader.next()) {
      bad_loads += b->bad_images;
      loader.recycle(*b);
    }
    for (auto& bad : ds->take_new_bad_images()) taken.push_back(bad);
  }
  EXPECT_EQ(bad_loads, 3);  // once per epoch
  EXPECT_EQ(ds->distinct_bad_images(), 1);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].path, bad_path);
  EXPECT_EQ(taken[0].reason, "not a JPEG or PNG file");
}

// Bytes of address space this process has mapped (VmSize), 0 if unknown.
int64_t mapped_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoll(line.substr(7)) * 1024;
  }
  return 0;
}

TEST(Loader, AWorkerThatCannotStartIsAnErrorAndTheStartedOnesAreJoined) {
  const std::string root = test::make_dataset("loader_no_threads", 2, 4, 1, 24);
  auto ds = open(root);
  test::HostArena arena(4, 2, ds->image_bytes());
  const int64_t mapped = mapped_bytes();
  if (mapped == 0) GTEST_SKIP() << "no /proc/self/status";
  // An address-space limit a little above what is mapped now (it binds root too, unlike RLIMIT_NPROC): a few
  // threads get their stacks, then pthread_create fails. Joinable threads left behind would std::terminate.
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_AS, &old), 0);
  rlimit tight = old;
  tight.rlim_cur = static_cast<rlim_t>(mapped + (64 << 20));
  ASSERT_EQ(::setrlimit(RLIMIT_AS, &tight), 0);
  std::string error;
  try {
    Loader loader(ds, options(2, 1000), &arena);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_AS, &old), 0);
  EXPECT_NE(error.find("cannot start decode thread"), std::string::npos) << error;
  EXPECT_NE(error.find(" of 1000: "), std::string::npos) << error;
  // The loader is usable again once threads can start.
  Loader loader(ds, options(2, 2), &arena);
  EXPECT_EQ(loader.workers(), 2);
}

// A loader whose worker never returns from sample `stuck` until the gate opens: a read stuck on a network file
// system, or a decoder looping inside its library.
LoaderOptions stuck_on(int64_t stuck, const std::shared_ptr<test::Gate>& gate, LoaderOptions o) {
  o.before_load = [gate, stuck](int64_t sample) {
    if (sample == stuck) gate->wait();
  };
  return o;
}

TEST(Loader, AWorkerStuckOnASampleRaisesStuckSampleNamingItsFile) {
  const std::string root = test::make_dataset("loader_stuck", 2, 6, 1, 24);
  auto ds = open(root);
  const int64_t stuck = 7;
  const std::string path = ds->folder().samples[stuck].path;
  auto gate = std::make_shared<test::Gate>();
  test::OpenAtExit release{gate};
  LoaderOptions o = stuck_on(stuck, gate, options(2, 2));
  o.sample_timeout_s = 0.3;
  test::HostArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
  {
    Loader loader(ds, o, &arena);
    loader.start_epoch(0);
    const std::string error = test::message_of<StuckSample>([&] {
      while (auto b = loader.next()) loader.recycle(*b);
    });
    EXPECT_EQ(error.rfind("no progress for ", 0), 0u) << error;
    EXPECT_NE(error.find(" s: a worker is still loading " + path + " (data.sample_timeout_s = 0.3)"), std::string::npos)
        << error;
    EXPECT_THROW(loader.next(), DataError) << "still stuck; a DataError, as an unreadable file";
    EXPECT_THROW(loader.start_epoch(1), StuckSample) << "abandoning the epoch waits for the same worker";
  }
  gate->open();
  EXPECT_TRUE(test::eventually([&] { return ds.use_count() == 1; })) << "the worker left running never ended";
}

TEST(Loader, AStopRequestedWhileNextWaitsRaisesInterrupted) {
  const std::string root = test::make_dataset("loader_interrupted", 2, 6, 1, 24);
  auto ds = open(root);
  const int64_t stuck = 4;
  auto gate = std::make_shared<test::Gate>();
  test::OpenAtExit release{gate};
  auto stop = std::make_shared<std::atomic<bool>>(false);
  LoaderOptions o = options(2, 2);  // no sample_timeout_s: only the stop can end the wait
  o.stop_requested = [stop] { return stop->load(); };
  o.before_load = [gate, stop, stuck](int64_t sample) {
    if (sample != stuck) return;
    *stop = true;  // Ctrl-C while this worker is stuck
    gate->wait();
  };
  test::HostArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
  Loader loader(ds, o, &arena);
  loader.start_epoch(0);
  const std::string error = test::message_of<Interrupted>([&] {
    while (auto b = loader.next()) loader.recycle(*b);
  });
  EXPECT_EQ(error, "interrupted: a stop was requested while waiting for the next batch");
  EXPECT_TRUE(*stop);
  gate->open();  // the worker ends its sample: the loader is destroyed as usual
}

TEST(Loader, DestroyedWithAWorkerStuckItReturnsAndTheWorkerNeverWritesIntoTheArena) {
  const std::string root = test::make_dataset("loader_stuck_destroyed", 2, 6, 1, 24);
  auto ds = open(root);
  const int64_t stuck = 2;
  const std::string path = ds->folder().samples[stuck].path;
  auto gate = std::make_shared<test::Gate>();
  test::OpenAtExit release{gate};
  LoaderOptions o = stuck_on(stuck, gate, options(2, 2));
  o.sample_timeout_s = 0.3;  // shutdown waits for a worker no longer than this
  test::HostArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
  const int detached = detached_threads();
  auto loader = std::make_unique<Loader>(ds, o, &arena);
  loader->start_epoch(0);
  ASSERT_TRUE(gate->entered()) << "sample " << stuck << " never loaded";
  testing::internal::CaptureStderr();
  loader.reset();
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("is still loading " + path + " after "), std::string::npos) << log;
  EXPECT_NE(log.find("left running (detached)"), std::string::npos) << log;
  EXPECT_GE(detached_threads(), detached + 1);
  // The worker finishes its sample after the Loader is gone: it must drop it, not write it into a batch slot.
  const std::vector<uint8_t> before = arena.bytes();
  gate->open();
  EXPECT_TRUE(test::eventually([&] { return ds.use_count() == 1; })) << "the worker left running never ended";
  EXPECT_TRUE(arena.bytes() == before) << "a worker left running wrote into the arena";
}

}  // namespace
}  // namespace pinfeed::data
