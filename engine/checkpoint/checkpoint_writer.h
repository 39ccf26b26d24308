// Checkpoints written off the training thread: save() takes host copies of the tensors, so that training goes on
// while one writer thread serialises them and writes each file atomically (save_checkpoint), one save after the
// other.
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/checkpoint/checkpoint.h"

namespace pinfeed::engine {

struct CheckpointFile {
  std::string path;
  Checkpoint checkpoint;
};

class CheckpointWriter {
 public:
  CheckpointWriter();
  // Waits for the write in flight; an error that no save() or wait() took is logged as a warning, never dropped.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Copies every tensor to host memory on the calling thread (its stream; a tensor that several files share,
  // once), so that the caller may change its tensors as soon as this returns. Then waits for the previous save
  // (throwing its error, and writing nothing of these) and hands the files to the writer thread, which writes
  // them in order and stops at the first that fails. Host memory: two saves' copies at most.
  void save(std::vector<CheckpointFile> files);
  // Returns once everything handed over is on disk; throws what the first failed write threw (save_checkpoint:
  // OutputError on a full disk or a folder it may not write), once.
  void wait();

 private:
  void write_loop();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<CheckpointFile> pending_;  // handed over, being written while busy_
  bool busy_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;  // of the last save, until wait() throws it
  std::thread thread_;        // last: starts once the members it uses exist
};

}  // namespace pinfeed::engine
