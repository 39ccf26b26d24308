// The memory this process may still use (common/host_memory.h), and what a ResNet training step asks of it.
#pragma once

#include <cstdint>

#include "common/host_memory.h"
#include "model/resnet.h"

namespace pinfeed::app {

// The host's memory (common/host_memory.h), under the names the plan and its tests use.
using common::CgroupMemory;
using common::cgroup_v1_memory;
using common::cgroup_v1_memory_path;
using common::cgroup_v2_memory;
using common::cgroup_v2_path;
using common::host_memory;
using common::HostMemory;
using common::mem_available;
using common::read_host_memory;
using common::ScopedHostMemory;

// Elements the network keeps for backward per input pixel (memory.cpp derives it from the architecture), with
// BlurPool (model.blurpool) or without.
double saved_elements_per_pixel(const model::ArchSpec& arch, bool blurpool = false);
// Bytes a training step keeps for backward: batch x image_size^2 x the figure above x a margin for what backward
// adds, at `element_bytes` (2 under bf16/fp16 autocast, 4 otherwise).
double activation_bytes(const model::ArchSpec& arch, int64_t batch, int64_t image_size, int element_bytes,
                        bool blurpool = false);
// Weights, their gradients, the optimizer's state (`optimizer_copies` of the weights: SGD's and LARS's momentum 1,
// LAMB's moments and update 3), the EMA's copy (train.ema) and a spare copy (autocast's casts, a checkpoint being
// written), fp32.
double model_state_bytes(const model::ArchSpec& arch, int64_t num_classes, int optimizer_copies = 1, bool ema = false);

}  // namespace pinfeed::app
