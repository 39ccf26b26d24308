// The bad image files a training run finds on every rank, listed once each in rank 0's bad_images.tsv.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>

#include "engine/dist/distributed.h"
#include "app/plan/datasets.h"
#include "app/run/run_outputs.h"

namespace pinfeed::app {

class BadImages {
 public:
  BadImages(const Datasets& sets, engine::Distributed& dist) : sets_(sets), dist_(dist) {}

  // Rank 0: a resumed run counts the training set's files bad_images.tsv listed before too.
  void count_listed(const RunOutputs& out);
  // Every rank's newly found bad files (its shard of the training set, and of the validation set) go to rank 0,
  // which lists each file once in bad_images.tsv and counts the training set's distinct files: a file can turn
  // up on several ranks (each epoch shards a new permutation, and a bad image's replacement may be any sample).
  // Every rank calls it, at the same points; out: rank 0's, null on the others.
  void record(RunOutputs* out);
  // A run stopping on bad input (data.on_bad_image = "fail", bad images in a row) lists the files found so far
  // before it ends, as each epoch does. This rank's alone: the others are at no collective to gather theirs.
  // A failure to write them must not hide the data error that ended the run.
  void list_found(RunOutputs& out) noexcept;
  // Rank 0: the distinct bad files of the training set found so far by any rank, resumes included.
  int64_t train_files() const { return static_cast<int64_t>(train_bad_.size()); }

 private:
  const Datasets& sets_;
  engine::Distributed& dist_;
  std::unordered_set<std::string> train_bad_;
};

}  // namespace pinfeed::app
