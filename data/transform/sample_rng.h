// Every random choice of the data path comes from a generator seeded by (seed, epoch, sample index), so a
// batch's content depends on neither the number of workers nor their timing.
#pragma once

#include <cstdint>
#include <random>

namespace pinfeed::data {

// SplitMix64 finaliser: a cheap, well-mixed 64-bit hash (Steele et al. 2014).
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t stream_seed(uint64_t seed, uint64_t epoch, uint64_t index, uint64_t purpose = 0) {
  return mix64(mix64(mix64(mix64(seed) ^ epoch) ^ index) ^ purpose);
}

// Small fast generator; uniform draws are written out here rather than taken from <random>'s
// distributions, whose algorithms differ between standard libraries.
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) : engine_(seed) {}
  uint64_t next() { return engine_(); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int64_t below(int64_t n) { return n <= 1 ? 0 : static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

 private:
  std::mt19937_64 engine_;
};

}  // namespace pinfeed::data
