// Microbenchmarks of the CPU input path, one core: JPEG decode alone, and decode + RandomResizedCrop + flip
// written into a batch slot (the work of one loader worker per sample). images/s per core = items_per_second.
// And one loader epoch of the GPU decode path, on a few threads.
// Runs in CI with a tiny --benchmark_min_time; no thresholds anywhere.
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "data/dataset/image_folder.h"
#include "data/jpeg/jpeg_check.h"
#include "data/loader/loader.h"
#include "data/dataset/synthetic.h"
#include "data/transform/transforms.h"
#include "tests/encoded_arena.h"

namespace {
using namespace pinfeed::data;

// Photo-like 500x375 JPEGs (~110 KB, like ImageNet's average), made once per process.
const std::vector<std::vector<uint8_t>>& photos() {
  static const std::vector<std::vector<uint8_t>> files = [] {
    SyntheticOptions o;
    o.out = (std::filesystem::temp_directory_path() / "pinfeed_bench_photos").string();
    std::filesystem::remove_all(o.out);
    o.classes = 4;
    o.train_per_class = 8;
    o.val_per_class = 0;
    o.width = 500;
    o.height = 375;
    o.photo = true;
    o.quality = 92;
    generate_synthetic(o);
    std::vector<std::vector<uint8_t>> out;
    for (const auto& s : scan_image_folder(o.out, "train").samples) {
      out.emplace_back();
      read_file(s.path, out.back());
    }
    return out;
  }();
  return files;
}

void BM_JpegDecodeOnly(benchmark::State& state) {
  cv::setNumThreads(1);
  const auto& files = photos();
  size_t i = 0, bytes = 0;
  for (auto _ : state) {
    const auto& f = files[i++ % files.size()];
    cv::Mat m = cv::imdecode(cv::Mat(1, static_cast<int>(f.size()), CV_8UC1, const_cast<uint8_t*>(f.data())),
                             cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
    benchmark::DoNotOptimize(m.data);
    bytes += f.size();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_JpegDecodeOnly)->Unit(benchmark::kMillisecond);

// The integrity check alone (every scan entropy-decoded, 1/8 DCT scale, all rows but the last skipped): what a
// CMYK JPEG costs on top of OpenCV's decode, and an upper bound of what the crop-region path pays to see the
// whole file (it now entropy-decodes the rows below its crop, which it used to leave unread). Other JPEGs with
// crop_decode off pay nothing: libjpeg-turbo's full decode reads every row anyway.
void BM_JpegIntegrityCheck(benchmark::State& state) {
  const auto& files = photos();
  std::vector<uint8_t> buffer;
  size_t i = 0;
  for (auto _ : state) {
    const auto& f = files[i++ % files.size()];
    check_jpeg(f.data(), f.size(), 0, buffer);
    benchmark::DoNotOptimize(buffer.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_JpegIntegrityCheck)->Unit(benchmark::kMillisecond);

// One epoch of the loader when the GPU decodes (data.decoder = "nvjpeg"): its workers read each file, parse its
// header and draw its crop, and check the file with libjpeg first unless that was done before (Dataset::load).
// Arg 0: 0 = a run's first epoch (nothing checked yet), 1 = a later epoch; Arg 1: LoaderOptions::check_threads
// (threads that check ahead of the workers at idle priority); Arg 2: workers; Arg 3: ms the consumer spends on
// each batch of 64 after taking it (a training step; 0: none, items_per_second is then the loader's ceiling).
// 1,024 samples: the photos again and again, as distinct samples. The threads checking ahead help only on cores
// nothing else wants: run it on an otherwise idle machine with more cores than workers.
void BM_LoaderEpochGpuFiles(benchmark::State& state) {
  cv::setNumThreads(1);
  photos();  // the folder written
  const ImageFolder photo_folder = scan_image_folder(
      (std::filesystem::temp_directory_path() / "pinfeed_bench_photos").string(), "train");
  ImageFolder folder = photo_folder;
  folder.samples.clear();
  for (size_t i = 0; i < 1024; ++i) folder.samples.push_back(photo_folder.samples[i % photo_folder.samples.size()]);
  TransformOptions t;
  t.format = PixelFormat::kUint8Hwc;
  t.size = 224;
  t.gpu_decode = true;
  LoaderOptions o;
  o.batch_size = 64;
  o.check_threads = static_cast<int>(state.range(1));
  o.workers = static_cast<int>(state.range(2));
  for (auto _ : state) {
    state.PauseTiming();
    const auto ds = std::make_shared<Dataset>(folder, t, true, BadImagePolicy::kSkip);
    if (state.range(0) == 1) ds->check_gpu_files(1);
    pinfeed::test::EncodedArena arena(o.prefetch_batches + 2, o.batch_size, ds->image_bytes());
    state.ResumeTiming();
    Loader loader(ds, o, &arena);
    loader.start_epoch(0);
    while (auto b = loader.next()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(state.range(3)));
      loader.recycle(*b);
    }
    state.PauseTiming();
    state.counters["checked_in_load"] = static_cast<double>(ds->gpu_checks().in_load);
    state.counters["checked_ahead"] = static_cast<double>(ds->gpu_checks().ahead);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(folder.samples.size()));
  state.SetLabel(std::string(state.range(0) ? "later epoch" : "first epoch") + ", " +
                 std::to_string(state.range(2)) + " worker(s), " + std::to_string(state.range(1)) +
                 " checking ahead, step " + std::to_string(state.range(3)) + " ms");
}
BENCHMARK(BM_LoaderEpochGpuFiles)
    ->Args({1, 0, 1, 0})->Args({0, 0, 1, 0})->Args({0, 1, 1, 0})
    ->Args({1, 0, 1, 40})->Args({0, 0, 1, 40})->Args({0, 1, 1, 40})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// Arg 0: 0 = float32 CHW normalised on the host, 1 = uint8 HWC; Arg 1: crop-region decode (libjpeg-turbo) on/off;
// Arg 2: output side.
void BM_DecodeCropIntoBatch(benchmark::State& state) {
  cv::setNumThreads(1);
  const auto& files = photos();
  TransformOptions o;
  o.format = state.range(0) ? PixelFormat::kUint8Hwc : PixelFormat::kFloat32Chw;
  o.crop_decode = state.range(1) != 0;
  o.size = static_cast<int>(state.range(2));
  std::vector<uint8_t> slot(bytes_per_image(o.format, o.size));
  DecodeScratch scratch;
  uint64_t i = 0;
  for (auto _ : state) {
    const auto& f = files[i % files.size()];
    SampleRng rng(stream_seed(0, 0, i++));
    decode_into(f.data(), f.size(), true, o, rng, scratch, slot.data());
    benchmark::DoNotOptimize(slot.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(std::string(o.format == PixelFormat::kUint8Hwc ? "uint8" : "float32") +
                 (o.crop_decode ? " crop-decode" : " full-decode") + " " + std::to_string(o.size) + "px");
}
BENCHMARK(BM_DecodeCropIntoBatch)
    ->Args({0, 0, 224})->Args({0, 1, 224})->Args({1, 0, 224})->Args({1, 1, 224})->Args({1, 1, 128})->Args({1, 0, 128})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
