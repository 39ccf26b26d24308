// Bounds of the options that size memory or threads, declared once for the config keys (app/config/keys.cpp) and
// the Python module's arguments (python/). They keep each value, and the products made of them, far from
// overflow; the checks against this machine (the host ring in half its memory, threads per core) come after them.
#pragma once

#include <algorithm>
#include <cstdint>

namespace pinfeed::data {

inline constexpr int64_t kMinImageSize = 16;
inline constexpr int64_t kMaxImageSize = 4096;  // ResNet-50 is trained at 128-600 px
inline constexpr int64_t kMaxEpochs = 1'000'000;
inline constexpr int64_t kMaxBatchSize = 1 << 20;  // per rank; the largest ImageNet batches published are 64k global
inline constexpr int64_t kMaxPrefetchBatches = 1024;  // decoded batches held in RAM; more only costs memory
inline constexpr int64_t kMaxWorkers = 1024;         // lowered to kMaxWorkersPerCore x the host's cores
inline constexpr int kMaxWorkersPerCore = 4;  // decode threads are CPU-bound: past a few per core they only contend
inline constexpr int64_t kMaxRanks = 1 << 20;  // WORLD_SIZE
inline constexpr int64_t kMaxMegabytes = int64_t{1} << 30;  // 1 PB: MB x 2^20 stays far inside int64
inline constexpr double kMinScale = 0.001;  // RandomResizedCrop's smallest area fraction
inline constexpr double kMinValResizeRatio = 0.1;
inline constexpr double kMaxSampleTimeoutS = 86400;

// The decode threads a host of `cores` cores may run.
inline int max_workers(int cores) {
  return static_cast<int>(std::min<int64_t>(kMaxWorkers, int64_t{kMaxWorkersPerCore} * std::max(1, cores)));
}

}  // namespace pinfeed::data
