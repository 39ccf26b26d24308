// Checkpoints: model, optimizer state, epoch, step, RNG state and config in one file that torch.load() can
// read (a dict of tensors and strings), written atomically.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

namespace pinfeed::app {

struct Checkpoint {
  std::map<std::string, at::Tensor> model;      // parameters and buffers, torchvision names
  std::map<std::string, at::Tensor> optimizer;  // momentum buffers by parameter name
  int64_t epoch = 0;          // the epoch to continue in
  int64_t step_in_epoch = 0;  // batches of that epoch already trained
  int64_t global_step = 0;
  int64_t world_size = 1;     // ranks that trained it: the shards and the step position depend on it
  at::Tensor torch_rng;  // CPU generator state
  std::string config;    // resolved TOML
};

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);  // throws OutputError
Checkpoint load_checkpoint(const std::string& path);                         // throws std::runtime_error

}  // namespace pinfeed::app
