#include "engine/checkpoint/checkpoint_writer.h"

#include <unordered_map>
#include <utility>

#include "common/log.h"
#include "pipeline/error_text.h"

namespace pinfeed::engine {
namespace {

// Host copies that the training thread can no longer change: copied even when the tensor is on the CPU already
// (the model's own parameters on a CPU run). A tensor met again (best.pt and last.pt hold the same weights) gets
// the copy made the first time; each source is kept until the end, so no address is reused meanwhile.
class HostCopies {
 public:
  at::Tensor operator()(const at::Tensor& t) {
    if (!t.defined()) return t;
    auto [it, fresh] = copies_.try_emplace(t.unsafeGetTensorImpl());
    if (fresh) it->second = {t, t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true)};
    return it->second.second;
  }
  void operator()(std::map<std::string, at::Tensor>& tensors) {
    for (auto& [name, t] : tensors) t = (*this)(t);
  }

 private:
  std::unordered_map<const c10::TensorImpl*, std::pair<at::Tensor, at::Tensor>> copies_;  // source, copy
};

void copy_to_host(Checkpoint& c, HostCopies& copy) {
  for (auto* tensors : {&c.model, &c.optimizer, &c.loss_scaler, &c.model_ema, &c.model_raw}) copy(*tensors);
  for (auto* t : {&c.torch_rng, &c.epoch_loss_sums, &c.rank_buffers}) *t = copy(*t);
}

}  // namespace

CheckpointWriter::CheckpointWriter() : thread_([this] { write_loop(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();  // after the write in flight
  if (!error_) return;
  try {
    std::rethrow_exception(error_);
  } catch (const std::exception& e) {
    log::warn("a checkpoint was not written: " + error_text(e));
  } catch (...) {
    log::warn("a checkpoint was not written");
  }
}

void CheckpointWriter::save(std::vector<CheckpointFile> files) {
  HostCopies copy;
  for (CheckpointFile& f : files) copy_to_host(f.checkpoint, copy);
  wait();
  {
    std::lock_guard lock(mutex_);
    pending_ = std::move(files);
    busy_ = true;
  }
  changed_.notify_all();
}

void CheckpointWriter::wait() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !busy_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void CheckpointWriter::write_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return busy_ || stopping_; });
    if (!busy_) return;  // stopping, nothing left to write
    std::vector<CheckpointFile> files = std::move(pending_);
    lock.unlock();
    std::exception_ptr error;
    try {
      for (const CheckpointFile& f : files) save_checkpoint(f.path, f.checkpoint);
    } catch (...) {
      error = std::current_exception();
    }
    files.clear();  // the copies go before the next save can hand over its own
    lock.lock();
    error_ = error;
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace pinfeed::engine
