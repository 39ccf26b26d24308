// gpu.h for a LibTorch built without CUDA: nothing is available, and anything that needs a device says so.
#include "gpu/gpu.h"

#include <stdexcept>

namespace pinfeed::gpu {
namespace {
[[noreturn]] void no_cuda() { throw std::runtime_error("pinfeed was built against a LibTorch without CUDA"); }
}  // namespace

struct Event::Impl {};
struct Graph::Impl {};
bool compiled_with_cuda() { return false; }
bool available() { return false; }
Event::Event() = default;
Event::~Event() = default;
void Event::record(const c10::Stream&) { no_cuda(); }
void Event::block(const c10::Stream&) { no_cuda(); }
bool Event::query() const { return true; }
void Event::synchronize() const {}
double Event::elapsed_ms(const Event&) const { no_cuda(); }
Graph::Graph() = default;
Graph::~Graph() = default;
void Graph::capture(const c10::Stream&, const c10::Stream&, int, const std::function<void()>&, const Graph*) {
  no_cuda();
}
void Graph::replay(const c10::Stream&) { no_cuda(); }
void set_device(int) { no_cuda(); }
c10::Stream current_stream(c10::Device) { no_cuda(); }
c10::Stream new_stream(c10::Device) { no_cuda(); }
void synchronize(const c10::Stream&) { no_cuda(); }
at::Tensor pinned_empty(const std::vector<int64_t>&, c10::ScalarType) { no_cuda(); }
DeviceInfo device_info(int) { no_cuda(); }
int64_t reserved_bytes(c10::Device) { no_cuda(); }

}  // namespace pinfeed::gpu

#include "gpu/nccl.h"

namespace pinfeed::gpu {
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int, int, int,
                                                    std::chrono::milliseconds) {
  throw std::runtime_error("pinfeed was built against a LibTorch without CUDA: no NCCL");
}
}  // namespace pinfeed::gpu
