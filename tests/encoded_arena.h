// A batch arena in plain host memory with room for what the GPU decodes (EncodedImage per sample), as the
// pipeline's ring gives it: what a Loader of GPU files needs without a GPU. Shared by tests and benchmarks.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "data/loader/batch_arena.h"
#include "data/dataset/dataset.h"

namespace pinfeed::test {

// Host memory with room for what the GPU decodes, as the pipeline's ring gives it.
class EncodedArena : public data::BatchArena {
 public:
  EncodedArena(int slots, int64_t batch, size_t image_bytes)
      : images_(slots, std::vector<uint8_t>(batch * image_bytes)), labels_(slots, std::vector<int64_t>(batch)),
        encoded_(slots, std::vector<data::EncodedImage>(batch)) {
    for (int i = 0; i < slots; ++i) free_.push_back(i);
  }
  int slots() const override { return static_cast<int>(images_.size()); }
  data::BatchMemory memory(int s) override { return {images_[s].data(), labels_[s].data(), encoded_[s].data()}; }
  std::optional<int> try_acquire() override {
    std::lock_guard<std::mutex> l(m_);
    if (free_.empty()) return std::nullopt;
    const int s = free_.back();
    free_.pop_back();
    return s;
  }
  std::optional<int> acquire() override { return try_acquire(); }
  void release(int s, std::shared_ptr<data::Fence>) override {
    std::lock_guard<std::mutex> l(m_);
    free_.push_back(s);
  }

 private:
  std::vector<std::vector<uint8_t>> images_;
  std::vector<std::vector<int64_t>> labels_;
  std::vector<std::vector<data::EncodedImage>> encoded_;
  std::vector<int> free_;
  std::mutex m_;
};

}  // namespace pinfeed::test
