// Microbenchmarks of the CPU input path, one core: JPEG decode alone, and decode + RandomResizedCrop + flip
// written into a batch slot (the work of one loader worker per sample). images/s per core = items_per_second.
// Runs in CI with a tiny --benchmark_min_time; no thresholds anywhere.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "data/image_folder.h"
#include "data/jpeg_check.h"
#include "data/synthetic.h"
#include "data/transforms.h"

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
