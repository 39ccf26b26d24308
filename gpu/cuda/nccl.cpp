#include "gpu/nccl.h"

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace pinfeed::gpu {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    int device_index, std::chrono::milliseconds timeout) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_index));  // before anything creates a context
  auto options = c10d::ProcessGroupNCCL::Options::create(/*is_high_priority_stream=*/false);
  options->timeout = timeout;
  auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, options);
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  backend->setBoundDeviceId(device);  // as init_process_group(device_id=...): the communicator is this GPU's
  backend->eagerConnectSingleDevice(device);  // fail now, naming the cause, rather than at the first step
  return backend;
}

}  // namespace pinfeed::gpu
