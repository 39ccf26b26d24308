// Streams, events, graphs and device memory for the rooms that have no CUDA code of their own: no CUDA types here.
// CUDA itself is written in the cuda/ folder of the room that owns it (gpu/cuda, model/cuda, pipeline/decode/cuda,
// pipeline/augment/cuda), each built only against a LibTorch with CUDA; without it, every call here that needs
// a device throws (see gpu_stub.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pinfeed::gpu {

bool compiled_with_cuda();
bool available();  // compiled with CUDA and a device is present

// A CUDA event with timing enabled. Not copyable: share it through a shared_ptr.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const c10::Stream& stream);
  void block(const c10::Stream& stream);  // `stream` waits for this event; the host does not
  bool query() const;                     // recorded work finished (true if never recorded)
  void synchronize() const;
  double elapsed_ms(const Event& later) const;  // both recorded and complete

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Events handed out again instead of created and destroyed per step (cudaEventCreate/Destroy are driver calls
// on the training thread). get() returns a free event, or a new one; it comes back to the pool when its last
// shared_ptr goes, so an event still referenced (a pending timing, a slot's fence) is never re-recorded.
// Thread-safe; the pool's storage lives as long as any event it handed out.
class EventPool {
 public:
  EventPool();
  std::shared_ptr<Event> get();
  int64_t created() const;  // events made so far: stays flat once the pipeline is in steady state

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// A captured CUDA graph of work issued by a callback (pimpl over at::cuda::CUDAGraph). The callback runs on a
// side stream, as capture requires; replay() launches the whole graph on `stream` with one call.
class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Runs body `warmup` times eagerly, then captures one more call of it. Both on `side` (not the default
  // stream: capture refuses it), which first waits for, and is afterwards waited on by, `stream`. Autograd nodes
  // that outlive a step (GradSync's gradient accumulators) must be made on `side`: the backward runs them on the
  // stream they were made on, and the default one cannot join a capture. share_pool: a graph captured before
  // whose memory pool this one shares (graphs replayed one after the other on one stream, never at once).
  void capture(const c10::Stream& stream, const c10::Stream& side, int warmup, const std::function<void()>& body,
               const Graph* share_pool = nullptr);
  void replay(const c10::Stream& stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Makes `index` this thread's current CUDA device (one process per GPU: its local rank).
void set_device(int index);
// The stream LibTorch's ops run on for `device`: a run takes it once, at set-up, and passes it on.
c10::Stream current_stream(c10::Device device);
c10::Stream new_stream(c10::Device device);  // a stream from LibTorch's pool, not the default one
void synchronize(const c10::Stream& stream);

// Page-locked host memory of exactly numel * itemsize bytes (cudaHostAlloc, freed with the tensor), so that
// the bytes pinned are the bytes asked for (LibTorch's caching host allocator rounds up to powers of two).
at::Tensor pinned_empty(const std::vector<int64_t>& shape, c10::ScalarType dtype);

struct DeviceInfo {
  std::string name;
  std::string driver;     // e.g. "13.0" (driver API version)
  std::string runtime;    // CUDA runtime version
  int64_t total_memory = 0;
};
DeviceInfo device_info(int index);
// What LibTorch's caching allocator holds from the driver on `device` now, bytes (CUDA graphs' pools included).
int64_t reserved_bytes(c10::Device device);

}  // namespace pinfeed::gpu
