// The optimizer a run steps with (train.optimizer), behind one interface: SGD (sgd.h), LARS (lars.h) and LAMB
// (lamb.h), made by name from one table. Every step can run inside a captured CUDA graph: the learning rate may
// come from a device scalar, and a step the fp16 loss scaler found an overflow in is skipped on the device.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pinfeed::engine {

enum class OptimizerKind { kSgd, kLars, kLamb };

// The names train.optimizer takes and checkpoints record ("sgd", "lars", "lamb"), in the order help lists them.
const std::vector<std::pair<std::string, OptimizerKind>>& optimizer_names();
const char* name_of(OptimizerKind kind);

struct SgdOptions {
  double momentum = 0.9;  // SGD's and LARS's
  bool nesterov = false;  // SGD's and LARS's
  double weight_decay = 1e-4;  // all three: L2 in SGD and LARS (inside LARS's trust ratio), LAMB's decay
};

// MLPerf's ResNet-50 LARS (You et al. 2017): each conv and fc weight's step is scaled by its trust ratio
// eta ||w|| / (||g|| + wd ||w|| + eps) (1 where either norm is 0), BN parameters and biases step as SGD.
struct LarsOptions {
  double eta = 0.001;  // trust coefficient
  double eps = 0;      // NVIDIA's MLPerf submissions: 0
};

// timm.optim.Lamb (You et al. 2019, NVIDIA's NVLAMB variant), with timm's defaults.
struct LambOptions {
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-6;
  double max_grad_norm = 1.0;     // the gradients divided by max(global norm / this, 1); 0 = no clipping
  bool trust_clip = false;        // the trust ratio clamped to at most 1 (LAMBC)
  bool decoupled_decay = false;   // weight decay applied to the weights (x (1 - lr wd)) before the trust ratio,
                                  // instead of added to the Adam direction inside it
};

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  SgdOptions sgd;
  LarsOptions lars;
  LambOptions lamb;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<at::Tensor> params) : params_(std::move(params)) {}
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  void zero_grad();  // sets gradients to None (frees them), as torch's default
  // found_inf (optional, a one-element device tensor, LossScaler::found_inf()): nonzero skips the whole step,
  // its state included, without the host reading it.
  virtual void step(double lr, const at::Tensor& found_inf = {}) = 0;
  // The learning rate read from a one-element device tensor: what a captured CUDA graph replays with.
  virtual void step(const at::Tensor& lr, const at::Tensor& found_inf = {}) = 0;

  // The state by name, for checkpoints: the tensors themselves (a CUDA graph that updates them keeps reading
  // these); empty before the first step. A momentum buffer is named as its parameter; other per-parameter state
  // "<kind>/<parameter>" (LAMB's "exp_avg/conv1.weight"); a scalar by its own name (LAMB's "step").
  virtual std::map<std::string, at::Tensor> state() const = 0;
  virtual std::map<std::string, at::Tensor> zero_state() const = 0;  // state()'s names and shapes, zeros
  virtual void load_state(const std::map<std::string, at::Tensor>& state) = 0;  // refuses a missing name
  // Every state tensor to zero, in place: the next step then steps as a first step does.
  virtual void reset_state() = 0;

 protected:
  std::vector<at::Tensor> params_;
};

using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

// A parameter group: one weight decay, its parameters and their names (torch's param_groups).
struct ParamGroup {
  double weight_decay = 0;
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
};

// The two groups each optimizer steps: [0] the parameters not in no_decay, with weight_decay; [1] those in it,
// with none. Parameters in `skip` go in neither.
std::vector<ParamGroup> decay_groups(const NamedParameters& named, const std::vector<std::string>& no_decay,
                                     double weight_decay, const std::vector<std::string>& skip = {});
std::vector<at::Tensor> tensors_of(const NamedParameters& named);
bool listed(const std::vector<std::string>& names, const std::string& name);

// named: (name, parameter). Names in no_decay get no weight decay (and, in LAMB, no trust ratio, as timm's
// parameter groups do).
std::unique_ptr<Optimizer> make_optimizer(const std::vector<std::pair<std::string, at::Tensor>>& named,
                                          const std::vector<std::string>& no_decay, const OptimizerOptions& options);

// The parameters of dimension 1: every BatchNorm weight and bias and every bias. The ones LARS never adapts,
// and those train.decay_bn_and_bias = false keeps from weight decay.
std::vector<std::string> bn_and_bias_names(const std::vector<std::pair<std::string, at::Tensor>>& named);

}  // namespace pinfeed::engine
