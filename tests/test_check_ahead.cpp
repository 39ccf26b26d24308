// Checking the GPU's files ahead of the loader's workers (data/loader/check_ahead.h): the walk's order, each file checked
// once, bad files left to load() and recorded once, the same batches as without it, a prompt stop, errors caught.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include "data/loader/check_ahead.h"
#include "data/loader/loader.h"
#include "data/transform/sample_rng.h"
#include "decode_cases.h"
#include "encoded_arena.h"

namespace pinfeed::data {
namespace {

// Everything a sample became: its label, what it left for the GPU, and its pixels when the CPU decoded it.
struct Loaded {
  int bad = 0;
  int64_t label = -1;
  JpegRoute kind = JpegRoute::kCpu;
  int x = 0, y = 0, w = 0, h = 0;
  bool flip = false;
  int reduction = 0;
  size_t bytes = 0;
  std::vector<uint8_t> pixels;  // the CPU path's, else empty
  bool operator==(const Loaded& o) const {
    return std::tie(bad, label, kind, x, y, w, h, flip, reduction, bytes, pixels) ==
           std::tie(o.bad, o.label, o.kind, o.x, o.y, o.w, o.h, o.flip, o.reduction, o.bytes, o.pixels);
  }
};

Loaded loaded(int bad, int64_t label, const EncodedImage& e, const uint8_t* pixels, size_t image_bytes) {
  Loaded l{bad, label, e.kind, e.box.x, e.box.y, e.box.w, e.box.h, e.box.flip, e.reduction, e.bytes.size(), {}};
  if (e.kind == JpegRoute::kCpu) l.pixels.assign(pixels, pixels + image_bytes);
  return l;
}

Loaded load(const Dataset& ds, int64_t index, int64_t epoch, DecodeScratch& scratch) {
  std::vector<uint8_t> pixels(ds.image_bytes());
  EncodedImage encoded;
  int64_t label = -1;
  const int bad = ds.load(index, 5, epoch, pixels.data(), &label, scratch, &encoded);
  return loaded(bad, label, encoded, pixels.data(), ds.image_bytes());
}

std::shared_ptr<Dataset> gpu_dataset(const ImageFolder& folder) {
  TransformOptions o;
  o.size = 32;
  o.format = PixelFormat::kUint8Hwc;
  o.gpu_decode = true;
  return std::make_shared<Dataset>(folder, o, true, BadImagePolicy::kSkip);
}

// The libjpeg checks a dataset of these files needs: each file the GPU takes once, counted on a dataset of its own.
int64_t checks_needed(const ImageFolder& folder) {
  const auto ds = gpu_dataset(folder);
  ds->check_gpu_files(1);
  return ds->gpu_checks().ahead;
}

// The files the GPU takes that pass the check.
int64_t good_gpu_files(const ImageFolder& folder) {
  const auto ds = gpu_dataset(folder);
  DecodeScratch scratch;
  int64_t good = 0;
  for (int64_t i = 0; i < ds->size(); ++i) good += ds->check_gpu_file(i, scratch);
  return good;
}

// Every case (valid and corrupt) `copies` times, as distinct files.
ImageFolder case_folder(const std::string& name, int copies) {
  std::vector<test::NamedFile> files;
  const std::vector<test::NamedFile> cases = test::decode_cases(/*corrupt=*/true);
  for (int c = 0; c < copies; ++c) files.insert(files.end(), cases.begin(), cases.end());
  return test::write_folder(name, files);
}

// A shuffled order of each epoch without its last `dropped` samples, like the loader's with drop_last.
CheckWalk::Order shuffled(int64_t samples, int64_t dropped) {
  return [=](int64_t epoch) {
    std::vector<int64_t> order(samples);
    std::iota(order.begin(), order.end(), int64_t{0});
    SampleRng rng(stream_seed(1, static_cast<uint64_t>(epoch), 0));
    for (int64_t i = samples - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
    order.resize(samples - dropped);
    return order;
  };
}

std::vector<int64_t> walk_all(CheckWalk& walk, int64_t loader = 0) {
  std::vector<int64_t> out;
  while (auto i = walk.next(loader)) out.push_back(*i);
  return out;
}

TEST(CheckWalk, FollowsTheLoadersOrderThenTheNextEpochsForWhatItLeftOut) {
  const CheckWalk::Order order = shuffled(10, 3);
  CheckWalk walk(10, order);
  const std::vector<int64_t> got = walk_all(walk);
  const std::vector<int64_t> epoch0 = order(0);
  ASSERT_GE(got.size(), epoch0.size());
  EXPECT_EQ(std::vector<int64_t>(got.begin(), got.begin() + 7), epoch0);
  std::vector<int64_t> rest;  // epoch 1's order without what epoch 0 gave, and so on
  for (int64_t e = 1; rest.size() < 3; ++e) {
    for (int64_t i : order(e)) {
      if (std::find(epoch0.begin(), epoch0.end(), i) == epoch0.end() &&
          std::find(rest.begin(), rest.end(), i) == rest.end()) {
        rest.push_back(i);
      }
    }
  }
  EXPECT_EQ(std::vector<int64_t>(got.begin() + 7, got.end()), rest);
  EXPECT_FALSE(walk.next(0));
}

TEST(CheckWalk, JumpsToTheLoaderWhenItIsAheadAndNotBack) {
  const CheckWalk::Order order = shuffled(12, 0);
  const std::vector<int64_t> o0 = order(0), o1 = order(1);
  CheckWalk walk(12, order);
  EXPECT_EQ(walk.next(CheckWalk::point(0, 0)), o0[0]);
  EXPECT_EQ(walk.next(CheckWalk::point(0, 5)), o0[5]);  // the workers have taken 0..4
  EXPECT_EQ(walk.next(CheckWalk::point(0, 2)), o0[6]);  // behind the walk: passed already
  EXPECT_EQ(walk.next(CheckWalk::point(0, 2)), o0[7]);
  std::vector<int64_t> got = walk_all(walk, CheckWalk::point(0, 2));
  // The rest of epoch 0, then what the jump skipped, in epoch 1's order.
  EXPECT_EQ(std::vector<int64_t>(got.begin(), got.begin() + 4), std::vector<int64_t>(o0.begin() + 8, o0.end()));
  std::vector<int64_t> skipped;
  for (int64_t i : o1) {
    if (std::find(o0.begin() + 1, o0.begin() + 5, i) != o0.begin() + 5) skipped.push_back(i);
  }
  EXPECT_EQ(std::vector<int64_t>(got.begin() + 4, got.end()), skipped);
}

TEST(CheckWalk, OvertakenItGoesOnALeadPastTheWorkersButStartsAnotherEpochWhereTheLoaderDoes) {
  const CheckWalk::Order order = shuffled(40, 0);
  const std::vector<int64_t> o0 = order(0), o1 = order(1);
  CheckWalk walk(40, order, /*lead=*/3);
  EXPECT_EQ(walk.next(CheckWalk::point(0, 0)), o0[0]);
  EXPECT_EQ(walk.next(CheckWalk::point(0, 0)), o0[1]);  // the workers behind
  EXPECT_EQ(walk.next(CheckWalk::point(0, 2)), o0[5]);  // level: 0 and 1 taken, 2..4 left to the workers
  EXPECT_EQ(walk.next(CheckWalk::point(0, 3)), o0[6]);
  EXPECT_EQ(walk.next(CheckWalk::point(0, 9)), o0[12]);  // overtaken
  std::set<int64_t> given{o0[0], o0[1], o0[5], o0[6], o0[12]};
  int64_t want = -1;  // epoch 1 from position 6 on, skipping what was given
  for (size_t p = 6; want < 0; ++p) {
    if (!given.count(o1[p])) want = o1[p];
  }
  EXPECT_EQ(walk.next(CheckWalk::point(1, 6)), want);  // the loader started epoch 1 at 6: no lead
}

TEST(CheckWalk, StartsAtTheEpochAndPositionTheLoaderStartsAt) {
  const CheckWalk::Order order = shuffled(8, 0);
  CheckWalk walk(8, order);
  EXPECT_EQ(walk.next(CheckWalk::point(3, 2)), order(3)[2]);  // a resumed run
  EXPECT_EQ(walk.next(CheckWalk::point(3, 2)), order(3)[3]);
  const std::vector<int64_t> got = walk_all(walk, CheckWalk::point(3, 2));
  std::set<int64_t> all(got.begin(), got.end());
  all.insert({order(3)[2], order(3)[3]});
  EXPECT_EQ(all.size(), 8u);
  EXPECT_EQ(got.size(), 6u);
}

TEST(CheckWalk, EndsAfterAWholeEpochWithNothingNew) {
  int calls = 0;
  CheckWalk walk(6, [&](int64_t) {  // a rank whose share never changes (no shuffle)
    ++calls;
    return std::vector<int64_t>{4, 0, 2};
  });
  EXPECT_EQ(walk_all(walk), (std::vector<int64_t>{4, 0, 2}));
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(walk.next(CheckWalk::point(9, 0)));  // ended for good
  EXPECT_EQ(calls, 2);
}

TEST(CheckWalk, EndsWhenEpochAfterEpochBringsNothingNew) {
  int calls = 0;
  CheckWalk walk(6, [&](int64_t epoch) {  // a share that never changes, in a new order every epoch
    ++calls;
    std::vector<int64_t> share{4, 0, 2};
    std::rotate(share.begin(), share.begin() + epoch % 3, share.end());
    return share;
  });
  EXPECT_EQ(walk_all(walk).size(), 3u);
  EXPECT_GT(calls, 2);
  EXPECT_LT(calls, 100);
}

TEST(CheckWalk, AnOrderOutsideTheDatasetIsALogicError) {
  CheckWalk walk(3, [](int64_t) { return std::vector<int64_t>{0, 3}; });
  EXPECT_EQ(walk.next(0), 0);
  EXPECT_THROW(walk.next(0), std::logic_error);
}

CheckAheadOptions threads(int n) {
  CheckAheadOptions o;
  o.threads = n;
  o.idle_priority = false;  // tests run beside other tests: no idle core to count on
  return o;
}

TEST(CheckAhead, ChecksEachFileOnceAcrossEpochsAndLeavesBadOnesToLoad) {
  const ImageFolder folder = case_folder("check_ahead_once", 2);
  const int64_t n = static_cast<int64_t>(folder.samples.size());
  const auto ds = gpu_dataset(folder);
  {
    CheckAhead ahead(ds, shuffled(n, 5), threads(3));
    ahead.wait();
    EXPECT_FALSE(ahead.error());
  }
  EXPECT_EQ(ds->gpu_checks().ahead, checks_needed(folder));
  EXPECT_GT(ds->gpu_checks().ahead, n / 2);
  EXPECT_EQ(ds->gpu_checks().in_load, 0);
  EXPECT_EQ(ds->distinct_bad_images(), 0);  // found, not named: load() names them

  // Loading checks only the bad files again (named, counted and replaced as on the CPU path), and gives what a
  // dataset that checks each file as it loads it gives.
  const auto alone = gpu_dataset(folder);
  DecodeScratch scratch;
  int64_t bad_loads = 0;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int64_t i = 0; i < n; ++i) {
      const Loaded got = load(*ds, i, epoch, scratch);
      EXPECT_EQ(got, load(*alone, i, epoch, scratch)) << folder.samples[i].path;
      bad_loads += got.bad;
    }
  }
  const int64_t bad_files = 2 * static_cast<int64_t>(test::corrupt_files().size());
  EXPECT_EQ(ds->distinct_bad_images(), bad_files);
  EXPECT_EQ(ds->take_new_bad_images().size(), static_cast<size_t>(bad_files));
  EXPECT_GT(bad_loads, 0);
  EXPECT_GT(ds->gpu_checks().in_load, 0);
  EXPECT_LE(ds->gpu_checks().in_load, bad_loads);
  // What the dataset alone checked more is each good file, once: they were all checked ahead here.
  EXPECT_EQ(alone->gpu_checks().in_load - ds->gpu_checks().in_load, good_gpu_files(folder));
}

// Workers and checking threads on the same files at the same moment (the same order): each load gives what it
// gives alone, each bad file is named once.
TEST(CheckAhead, WorkersRacingTheCheckersOnTheSameFilesGetWhatTheyGetAlone) {
  const ImageFolder folder = case_folder("check_ahead_race", 6);
  const int64_t n = static_cast<int64_t>(folder.samples.size());
  const auto alone = gpu_dataset(folder);
  std::vector<Loaded> want;
  DecodeScratch scratch;
  for (int64_t i = 0; i < n; ++i) want.push_back(load(*alone, i, 0, scratch));

  for (int round = 0; round < 3; ++round) {
    const auto ds = gpu_dataset(folder);
    std::vector<Loaded> got(n);
    {
      CheckAhead ahead(ds, [n](int64_t) {
        std::vector<int64_t> order(n);
        std::iota(order.begin(), order.end(), int64_t{0});
        return order;
      }, threads(3));
      std::atomic<int64_t> next{0};
      std::vector<std::thread> workers;
      for (int w = 0; w < 3; ++w) {
        workers.emplace_back([&] {
          DecodeScratch s;
          for (int64_t i = next++; i < n; i = next++) got[i] = load(*ds, i, 0, s);
        });
      }
      for (auto& t : workers) t.join();
      ahead.wait();
      EXPECT_FALSE(ahead.error());
    }
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(got[i], want[i]) << folder.samples[i].path << ", round " << round;
    EXPECT_EQ(ds->distinct_bad_images(), alone->distinct_bad_images());
    std::map<std::string, int> named;
    for (const BadImage& b : ds->take_new_bad_images()) ++named[b.path];
    EXPECT_EQ(static_cast<int64_t>(named.size()), alone->distinct_bad_images());
    for (const auto& [path, times] : named) EXPECT_EQ(times, 1) << path;
    // Every good file is checked now, by one side or both: a second pass checks only bad files again.
    const int64_t before = ds->gpu_checks().in_load, alone_before = alone->gpu_checks().in_load;
    for (int64_t i = 0; i < n; ++i) load(*ds, i, 1, scratch);
    for (int64_t i = 0; i < n; ++i) load(*alone, i, 1, scratch);
    EXPECT_EQ(ds->gpu_checks().in_load - before, alone->gpu_checks().in_load - alone_before);
  }
}

// One file as many samples: minutes of checking, stopped at once.
ImageFolder one_file_many_times(const std::string& name, int64_t samples) {
  ImageFolder folder = test::write_folder(name, {{"photo", test::encode(test::smooth_image(500, 375, 3), ".jpg")}});
  folder.samples.assign(static_cast<size_t>(samples), folder.samples[0]);
  return folder;
}

TEST(CheckAhead, DestroyedMidWalkItStopsAfterTheFilesInHand) {
  const int64_t n = 200000;
  const auto ds = gpu_dataset(one_file_many_times("check_ahead_stop", n));
  {
    CheckAhead ahead(ds, shuffled(n, 0), threads(2));
    while (ds->gpu_checks().ahead < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const int64_t after = ds->gpu_checks().ahead;
  EXPECT_LT(after, n / 10);  // far from the walk's end
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ds->gpu_checks().ahead, after);  // no thread left running
}

TEST(CheckAhead, AnErrorStopsItWithAWarningAndTheWorkersCheckTheRest) {
  const ImageFolder folder = case_folder("check_ahead_error", 1);
  const int64_t n = static_cast<int64_t>(folder.samples.size());
  const auto ds = gpu_dataset(folder);
  {
    CheckAhead ahead(ds, [](int64_t epoch) -> std::vector<int64_t> {
      if (epoch > 0) throw std::runtime_error("no order for epoch " + std::to_string(epoch));
      return {0, 1, 2};
    }, threads(2));
    ahead.wait();
    ASSERT_TRUE(ahead.error());
    EXPECT_EQ(test::message_of<std::runtime_error>([&] { std::rethrow_exception(ahead.error()); }),
              "no order for epoch 1");
  }
  const int64_t ahead_checks = ds->gpu_checks().ahead;
  EXPECT_LE(ahead_checks, 3);
  const auto alone = gpu_dataset(folder);
  DecodeScratch scratch;
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(load(*ds, i, 0, scratch), load(*alone, i, 0, scratch)) << i;
  EXPECT_EQ(ds->gpu_checks().ahead + ds->gpu_checks().in_load, alone->gpu_checks().in_load);
  EXPECT_EQ(ds->distinct_bad_images(), alone->distinct_bad_images());
}

TEST(CheckAhead, DestroyedWithAThreadStuckOnAFileItReturnsAndLeavesThatThreadRunning) {
  const ImageFolder folder = case_folder("check_ahead_stuck", 1);
  const int64_t n = static_cast<int64_t>(folder.samples.size());
  const auto ds = gpu_dataset(folder);
  auto gate = std::make_shared<test::Gate>();
  test::OpenAtExit release{gate};
  CheckAheadOptions o = threads(2);
  o.stop_wait_s = 0.2;
  o.before_check = [gate](int64_t sample) {  // a read of sample 0 that never returns
    if (sample == 0) gate->wait();
  };
  auto ahead = std::make_unique<CheckAhead>(ds, [n](int64_t) {
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), int64_t{0});
    return order;
  }, o);
  ASSERT_TRUE(gate->entered());
  testing::internal::CaptureStderr();
  ahead.reset();
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("is still checking " + folder.samples[0].path + " after "), std::string::npos) << log;
  EXPECT_NE(log.find("left running (detached)"), std::string::npos) << log;
  gate->open();
  EXPECT_TRUE(test::eventually([&] { return ds.use_count() == 1; })) << "the thread left running never ended";
}

TEST(CheckAhead, ItsThreadsRunAtIdlePriority) {
  const auto ds = gpu_dataset(case_folder("check_ahead_idle", 1));
  std::mutex m;
  std::vector<int> policies, nices;
  CheckAheadOptions o;
  o.threads = 2;
  CheckAhead ahead(ds, [&](int64_t) {  // called on a checking thread
    std::lock_guard<std::mutex> lock(m);
    policies.push_back(sched_getscheduler(0));
    nices.push_back(getpriority(PRIO_PROCESS, 0));
    return std::vector<int64_t>{0};
  }, o);
  ahead.wait();
  ASSERT_FALSE(policies.empty());
  for (size_t i = 0; i < policies.size(); ++i) EXPECT_TRUE(policies[i] == SCHED_IDLE || nices[i] == 19);
}

LoaderOptions loader_options(int check_threads) {
  LoaderOptions o;
  o.batch_size = 4;
  o.workers = 2;
  o.prefetch_batches = 3;
  o.seed = 11;
  o.check_threads = check_threads;
  return o;
}

// Each epoch's batches: per sample what it became, and per batch its bad loads (a last element of bad only).
std::vector<std::vector<Loaded>> run_epochs(Loader& loader, int64_t epochs) {
  std::vector<std::vector<Loaded>> out;
  const size_t image_bytes = loader.dataset().image_bytes();
  for (int64_t e = 0; e < epochs; ++e) {
    loader.start_epoch(e);
    while (auto b = loader.next()) {
      std::vector<Loaded> batch;
      for (int64_t i = 0; i < b->size; ++i) {
        batch.push_back(loaded(0, b->memory.labels[i], b->memory.encoded[i],
                               static_cast<const uint8_t*>(b->memory.images) + i * image_bytes, image_bytes));
      }
      Loaded counts;
      counts.bad = b->bad_images;
      batch.push_back(counts);
      out.push_back(std::move(batch));
      loader.recycle(*b);
    }
  }
  return out;
}

TEST(LoaderCheckAhead, BatchesAreTheSameWithAndWithoutCheckingAhead) {
  const ImageFolder folder = case_folder("check_ahead_loader", 2);
  std::vector<std::vector<std::vector<Loaded>>> runs;
  std::vector<int64_t> bad;
  for (int check_threads : {0, 3, 1}) {
    const auto ds = gpu_dataset(folder);
    const LoaderOptions o = loader_options(check_threads);
    test::EncodedArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
    Loader loader(ds, o, &arena);
    EXPECT_EQ(loader.check_ahead() ? loader.check_ahead()->threads() : 0, check_threads);
    runs.push_back(run_epochs(loader, 3));
    bad.push_back(ds->distinct_bad_images());
  }
  EXPECT_EQ(runs[1], runs[0]);
  EXPECT_EQ(runs[2], runs[0]);
  EXPECT_EQ(bad[0], 2 * static_cast<int64_t>(test::corrupt_files().size()));
  EXPECT_EQ(bad[1], bad[0]);
  EXPECT_EQ(bad[2], bad[0]);
}

TEST(LoaderCheckAhead, OnlyALoaderOfGpuFilesChecksAheadByDefault) {
  const ImageFolder folder = case_folder("check_ahead_default", 1);
  TransformOptions cpu;
  cpu.size = 32;
  const auto cpu_ds = std::make_shared<Dataset>(folder, cpu, true, BadImagePolicy::kSkip);
  const auto gpu_ds = gpu_dataset(folder);
  test::EncodedArena arena(5, 4, gpu_ds->image_bytes());
  const LoaderOptions o = loader_options(-1);
  {
    Loader loader(cpu_ds, o, &arena);
    EXPECT_EQ(loader.check_ahead(), nullptr);
  }
  Loader loader(gpu_ds, o, &arena);
  ASSERT_NE(loader.check_ahead(), nullptr);
  EXPECT_GE(loader.check_ahead()->threads(), 1);
}

// Once the threads are through, the workers check nothing but bad files: the first epoch reads as the later ones.
TEST(LoaderCheckAhead, WithTheWalkDoneTheWorkersCheckOnlyBadFiles) {
  const ImageFolder folder = case_folder("check_ahead_done", 2);
  for (int shards : {1, 3}) {
    for (bool shuffle : {true, false}) {
      const auto ds = gpu_dataset(folder);
      LoaderOptions o = loader_options(2);
      o.shards = shards;
      o.shuffle = shuffle;
      // Only the two epochs counted below load: a third prefetched behind them would load (and check) bad files
      // no batch here returns.
      o.continue_into_next_epoch = false;
      test::EncodedArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
      Loader loader(ds, o, &arena);
      ASSERT_NE(loader.check_ahead(), nullptr);
      loader.check_ahead()->wait();
      EXPECT_FALSE(loader.check_ahead()->error());
      EXPECT_EQ(ds->gpu_checks().in_load, 0);
      const bool whole_set = shards == 1 || shuffle;  // else a rank's share is the same every epoch: only it
      if (whole_set) {
        EXPECT_EQ(ds->gpu_checks().ahead, checks_needed(folder)) << shards << (shuffle ? " shuffled" : "");
      } else {
        EXPECT_LT(ds->gpu_checks().ahead, checks_needed(folder));
      }
      const auto batches = run_epochs(loader, 2);
      int64_t bad_loads = 0;
      for (const auto& b : batches) bad_loads += b.back().bad;
      // A bad file is checked again each time it is loaded. (Outside a fixed share, the replacement of a bad
      // sample may be a file this rank never checked: its workers check it.)
      if (whole_set) {
        EXPECT_LE(ds->gpu_checks().in_load, bad_loads) << shards << (shuffle ? " shuffled" : "");
      }
    }
  }
}

TEST(LoaderCheckAhead, DestroyedMidEpochItJoinsItsCheckingThreads) {
  const int64_t n = 200000;
  const auto ds = gpu_dataset(one_file_many_times("check_ahead_loader_stop", n));
  int64_t after = 0;
  {
    const LoaderOptions o = loader_options(2);
    test::EncodedArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
    Loader loader(ds, o, &arena);
    loader.start_epoch(0);
    auto b = loader.next();
    ASSERT_TRUE(b);
    loader.recycle(*b);
  }
  after = ds->gpu_checks().ahead + ds->gpu_checks().in_load;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ds->gpu_checks().ahead + ds->gpu_checks().in_load, after);  // no thread left running
  EXPECT_LT(after, n / 10);
}

}  // namespace
}  // namespace pinfeed::data
