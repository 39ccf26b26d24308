// c10d's NCCL backend, built where CUDA code lives (gpu/cuda/nccl.cpp); without CUDA it throws.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace pinfeed::gpu {

// One communicator over `world` ranks for CUDA device `device_index` (this rank's), connected at once.
// timeout: the watchdog's bound on every collective; past it the process aborts rather than hangs.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    int device_index, std::chrono::milliseconds timeout);

}  // namespace pinfeed::gpu
