// A rank's share of an epoch in data-parallel training. Every rank draws the same permutation (same seed);
// global batch g is order[g*B*N, (g+1)*B*N) for N ranks of batch B, and rank r takes its r-th run of B. So N
// ranks of batch B see, step by step, the samples 1 rank of batch N*B would, and the shards are disjoint.
#pragma once

#include <cstdint>
#include <vector>

namespace pinfeed::data {

// drop_last (training): only whole global batches, so every rank has the same number of steps. Otherwise
// (validation) every sample exactly once; the last global batch may leave some ranks a short or no batch.
std::vector<int64_t> shard_of(const std::vector<int64_t>& order, int64_t batch_size, int rank, int ranks,
                              bool drop_last);

}  // namespace pinfeed::data
