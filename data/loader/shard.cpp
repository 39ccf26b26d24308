#include "data/loader/shard.h"

#include <algorithm>

namespace pinfeed::data {

std::vector<int64_t> shard_of(const std::vector<int64_t>& order, int64_t batch_size, int rank, int ranks,
                              bool drop_last) {
  const auto n = static_cast<int64_t>(order.size());
  const int64_t global = batch_size * ranks;
  const int64_t end = drop_last ? n / global * global : n;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(end / ranks + batch_size));
  for (int64_t g = 0; g < end; g += global) {
    const int64_t begin = std::min(end, g + rank * batch_size);
    const int64_t stop = std::min(end, begin + batch_size);
    mine.insert(mine.end(), order.begin() + begin, order.begin() + stop);
  }
  return mine;
}

}  // namespace pinfeed::data
