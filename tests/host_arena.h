// A batch arena in plain host memory, as the pipeline's ring gives it: the slots a Loader writes into, without a
// GPU (fences ignored: the loader's ordering does not depend on them). Shared by tests, feed_reference and benchmarks.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "data/dataset/dataset.h"
#include "data/loader/batch_arena.h"

namespace pinfeed::test {

class HostArena : public data::BatchArena {
 public:
  // encoded: room for what the GPU decodes (an EncodedImage per sample), which a Loader of GPU files needs; a
  // Loader given it hands CPU files over that way too, so arenas for CPU-decoded datasets leave it off.
  HostArena(int slots, int64_t batch, size_t image_bytes, bool encoded = false)
      : images_(slots, std::vector<uint8_t>(batch * image_bytes)), labels_(slots, std::vector<int64_t>(batch)),
        encoded_(encoded ? slots : 0, std::vector<data::EncodedImage>(encoded ? batch : 0)) {
    for (int i = 0; i < slots; ++i) free_.push_back(i);
  }
  int slots() const override { return static_cast<int>(images_.size()); }
  data::BatchMemory memory(int s) override {
    return {images_[s].data(), labels_[s].data(), encoded_.empty() ? nullptr : encoded_[s].data()};
  }
  std::optional<int> try_acquire() override {
    std::lock_guard<std::mutex> l(m_);
    if (free_.empty()) return std::nullopt;
    const int s = free_.back();
    free_.pop_back();
    ++acquired_;
    return s;
  }
  std::optional<int> acquire() override { return try_acquire(); }
  void release(int s, std::shared_ptr<data::Fence>) override {
    std::lock_guard<std::mutex> l(m_);
    free_.push_back(s);
  }
  int64_t acquired() {  // slots handed out so far: one per batch opened
    std::lock_guard<std::mutex> l(m_);
    return acquired_;
  }
  std::vector<uint8_t> bytes() {  // every slot's images and labels, back to back
    std::vector<uint8_t> out;
    for (size_t i = 0; i < images_.size(); ++i) {
      out.insert(out.end(), images_[i].begin(), images_[i].end());
      const auto* l = reinterpret_cast<const uint8_t*>(labels_[i].data());
      out.insert(out.end(), l, l + labels_[i].size() * sizeof(int64_t));
    }
    return out;
  }

 private:
  std::vector<std::vector<uint8_t>> images_;
  std::vector<std::vector<int64_t>> labels_;
  std::vector<std::vector<data::EncodedImage>> encoded_;  // empty without room for the GPU's files
  std::vector<int> free_;
  int64_t acquired_ = 0;
  std::mutex m_;
};

}  // namespace pinfeed::test
