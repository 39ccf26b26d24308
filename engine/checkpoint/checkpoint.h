// Checkpoints: model, optimizer state, epoch, step, RNG state and config in one file that a plain
// torch.load() reads, weights_only=True included (a dict of tensors, ints and strings), written atomically.
#pragma once

#include <ATen/core/Tensor.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pinfeed::engine {

struct Checkpoint {
  std::map<std::string, at::Tensor> model;      // parameters and buffers, torchvision names
  // The optimizer's state by name (Optimizer::state(): SGD's and LARS's momentum buffers by parameter name;
  // LAMB's "exp_avg/<name>", "exp_avg_sq/<name>" and "step"), and which optimizer wrote it (optional key: an
  // older file is SGD's).
  std::map<std::string, at::Tensor> optimizer;
  std::string optimizer_name = "sgd";
  std::map<std::string, at::Tensor> loss_scaler;  // fp16: LossScaler::state(); empty otherwise (optional key)
  int64_t epoch = 0;          // the epoch to continue in
  int64_t step_in_epoch = 0;  // batches of that epoch already trained
  int64_t global_step = 0;
  int64_t world_size = 1;     // ranks that trained it: the shards and the step position depend on it
  // What the step position means; a resume refuses a run where any of them differs. 0: not recorded (a
  // format-1 file).
  int64_t batch_size = 0;       // per rank (train.batch_size)
  int64_t train_images = 0;     // images in the training folder
  int64_t steps_per_epoch = 0;  // per rank, after train.max_steps_per_epoch
  at::Tensor torch_rng;  // CPU generator state
  // What stays per rank until the epoch ends, so that a run resumed mid-epoch goes on as the uninterrupted one;
  // undefined in a file of an older pinfeed (the resumed epoch's loss then covers the steps after the resume,
  // and every rank goes on from the averaged BN statistics). Optional keys: an older pinfeed ignores them.
  at::Tensor epoch_loss_sums;  // (world,) float64: each rank's sum of the step losses of the epoch so far
  at::Tensor rank_buffers;     // (world, n) float32, several ranks: each rank's BN running statistics (its floating
                               // buffers in named_buffers() order, flattened); `model` holds their mean
  std::string config;    // resolved TOML
  // Optional keys (an older file has none): the training folder's class names, label i = classes[i], so that
  // predictions are named; and the best validation top-1 so far (best.pt: its own), NaN when none was measured.
  std::vector<std::string> classes;
  double best_val_top1 = NAN;
  // Optional keys, train.ema: the EMA of the weights (torchvision names, as `model`), and the updates it has had.
  std::map<std::string, at::Tensor> model_ema;
  int64_t ema_updates = 0;
  // Which weights scored best_val_top1: "raw" or "ema" ("" when none was measured, or in an older file). In
  // best.pt with "ema", `model` holds the EMA's weights and model_raw the raw ones (what a resume trains on).
  std::string best_weights;
  std::map<std::string, at::Tensor> model_raw;
  int64_t format_version = 0;  // of the file read (load_checkpoint); save_checkpoint writes the newest
  std::string path;            // the file load_checkpoint read, for messages; not written
};

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);  // throws OutputError
// Reads format 2 and format 1 (older pinfeed: no sizes above, and only LibTorch or torch.load(weights_only=False)
// could read it), through read_torch_file's bounds (torch_file.h). Refuses non-finite weights and impossible
// positions (a negative epoch or step, world_size < 1) naming the key. Throws CheckpointError (missing file, not a
// pinfeed checkpoint: a state dict is pointed to train.init_from) or DataError (truncated or damaged).
Checkpoint load_checkpoint(const std::string& path);
// Refuses (DataError naming the entry) optimizer state that lacks a parameter's entries: each *.weight and *.bias
// of `model` needs one of every kind present. A resume calls it once `model` is known to hold the network's names
// (copy_weights), so that a name the network has not is refused as that, not as missing momentum.
void check_optimizer_covers_model(const Checkpoint& checkpoint, const std::string& path);

// The weights of a pinfeed checkpoint or of a state dict that Python wrote with torch.save(model.state_dict())
// (torchvision's names), for evaluating, predicting and starting a new run from them.
struct Weights {
  std::map<std::string, at::Tensor> model;
  std::vector<std::string> classes;  // empty when the file names none (a state dict)
  std::string config;                // a checkpoint's resolved TOML; empty for a state dict
  bool checkpoint = false;           // a pinfeed checkpoint, else a state dict
};
// Throws as load_checkpoint does.
Weights load_weights(const std::string& path);

}  // namespace pinfeed::engine
