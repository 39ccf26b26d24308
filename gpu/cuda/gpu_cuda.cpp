// gpu.h on CUDA: the only place outside tests that includes c10/cuda and ATen/cuda.
#include "gpu/gpu.h"

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/ops/from_blob.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <stdexcept>

namespace pinfeed::gpu {

struct Event::Impl {
  at::cuda::CUDAEvent event{cudaEventDefault};  // timing on; created lazily on first record
};

bool compiled_with_cuda() { return true; }
bool available() { return c10::cuda::device_count() > 0; }

Event::Event() : impl_(std::make_unique<Impl>()) {}
Event::~Event() = default;
void Event::record(const c10::Stream& stream) { impl_->event.record(c10::cuda::CUDAStream(stream)); }
void Event::block(const c10::Stream& stream) { impl_->event.block(c10::cuda::CUDAStream(stream)); }
bool Event::query() const { return impl_->event.query(); }
void Event::synchronize() const { impl_->event.synchronize(); }
double Event::elapsed_ms(const Event& later) const { return impl_->event.elapsed_time(later.impl_->event); }

struct Graph::Impl {
  at::cuda::CUDAGraph graph;
};

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::~Graph() = default;

void Graph::capture(const c10::Stream& stream, const c10::Stream& side_stream, int warmup,
                    const std::function<void()>& body, const Graph* share_pool) {
  const c10::cuda::CUDAStream current(stream), side(side_stream);
  at::cuda::CUDAEvent before, after;
  before.record(current);
  before.block(side);
  {
    c10::cuda::CUDAStreamGuard guard(side);
    for (int i = 0; i < warmup; ++i) body();  // lazy initialisation, cuDNN autotuning, allocator warm-up
    side.synchronize();
    // Thread-local capture: only this thread's unsafe calls (a synchronisation, cudaMalloc) would break it. In
    // the global mode any thread's would, and the Feeder's copier keeps working through the capture: with
    // data.decoder = "nvjpeg" it waits on events, allocates and uploads files while the step is captured.
    using Pool = decltype(impl_->graph.pool());
    const Pool pool = share_pool ? share_pool->impl_->graph.pool() : Pool{0, 0};
    impl_->graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    body();
    impl_->graph.capture_end();
  }
  after.record(side);
  after.block(current);
}

void Graph::replay(const c10::Stream& stream) {
  const c10::cuda::CUDAStreamGuard guard{c10::cuda::CUDAStream(stream)};  // CUDAGraph::replay launches on the current stream
  impl_->graph.replay();
}

void set_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

c10::Stream current_stream(c10::Device device) {
  return c10::cuda::getCurrentCUDAStream(device.has_index() ? device.index() : -1).unwrap();
}

c10::Stream new_stream(c10::Device device) {
  return c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.has_index() ? device.index() : -1).unwrap();
}

void synchronize(const c10::Stream& stream) { c10::cuda::CUDAStream(stream).synchronize(); }

at::Tensor pinned_empty(const std::vector<int64_t>& shape, c10::ScalarType dtype) {
  int64_t numel = 1;
  for (auto d : shape) numel *= d;
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  void* ptr = nullptr;
  const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error state for the caller's fallback
    throw std::runtime_error(std::string("cudaHostAlloc(") + std::to_string(bytes) + " bytes): " +
                             cudaGetErrorString(err));
  }
  return at::from_blob(ptr, shape, [](void* p) { cudaFreeHost(p); }, at::TensorOptions().dtype(dtype));
}

int64_t reserved_bytes(c10::Device device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
}

DeviceInfo device_info(int index) {
  cudaDeviceProp prop{};
  C10_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  int driver = 0, runtime = 0;
  C10_CUDA_CHECK(cudaDriverGetVersion(&driver));
  C10_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  return {prop.name, version(driver), version(runtime), static_cast<int64_t>(prop.totalGlobalMem)};
}

}  // namespace pinfeed::gpu
