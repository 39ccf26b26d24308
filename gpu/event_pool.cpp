#include <mutex>
#include <vector>

#include "gpu/gpu.h"

namespace pinfeed::gpu {

struct EventPool::State {
  std::mutex mutex;
  std::vector<std::unique_ptr<Event>> free;
  int64_t created = 0;
};

EventPool::EventPool() : state_(std::make_shared<State>()) {}

std::shared_ptr<Event> EventPool::get() {
  std::unique_ptr<Event> event;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (!state_->free.empty()) {
      event = std::move(state_->free.back());
      state_->free.pop_back();
    } else {
      ++state_->created;
    }
  }
  if (!event) event = std::make_unique<Event>();
  // The deleter holds the state, not the pool: an event may outlive the EventPool object that made it.
  return std::shared_ptr<Event>(event.release(), [state = state_](Event* e) {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->free.emplace_back(e);
  });
}

int64_t EventPool::created() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->created;
}

}  // namespace pinfeed::gpu
