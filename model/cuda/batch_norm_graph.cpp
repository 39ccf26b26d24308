// BN + ReLU and BN + add + ReLU through the cuDNN frontend's graph API: model/batch_norm.h's GraphBatchNorm.
#include "model/cuda/batch_norm_graph.h"

#include <dlfcn.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <ATen/cudnn/Handle.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "model/cuda/cudnn_graph.h"

namespace cudnn_frontend {
// Where the frontend looks cuDNN's symbols up: the global scope, which holds the libcudnn that pinfeed links
// and LibTorch loads (RTLD_DEFAULT).
void* cudnn_dlhandle = RTLD_DEFAULT;
}  // namespace cudnn_frontend

namespace pinfeed::model::detail {
namespace graph {

void check(fe::error_t status, const char* what) {
  TORCH_CHECK(status.is_good(), "graph BatchNorm: ", what, ": ", status.get_message());
}

void build(fe::graph::Graph& g, cudnnHandle_t handle) {
  const PlanCostTimer timer;
  check(g.validate(), "validate");
  check(g.build_operation_graph(handle), "operation graph");
  check(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "execution plans");
  check(g.check_support(handle), "support");
  check(g.build_plans(handle), "plan build");
}

fe::DataType_t io_type(at::ScalarType t) {
  TORCH_CHECK(t == at::kHalf || t == at::kBFloat16, "graph BatchNorm: input must be bf16 or fp16, got ", t);
  return t == at::kHalf ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16;
}

TensorAttr nhwc(fe::graph::Graph& g, const char* name, const at::Tensor& x, fe::DataType_t type) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_dim({n, c, h, w}).set_stride(
      {c * h * w, 1, c * w, c}).set_data_type(type));
}

TensorAttr per_channel(fe::graph::Graph& g, const char* name, int64_t c) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_dim({1, c, 1, 1}).set_stride({c, 1, c, c})
                      .set_data_type(fe::DataType_t::FLOAT));
}

void start(fe::graph::Graph& g, at::ScalarType dtype) {
  g.set_io_data_type(io_type(dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
}

std::string attempt(const std::function<void()>& build) {
  try {
    build();
    return "";
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return std::string("cuDNN frontend: ") + e.what();
  }
}

cudnnHandle_t handle_on(const at::Tensor& x) {
  cudnnHandle_t handle = at::native::getCudnnHandle();
  const cudnnStatus_t s = cudnnSetStream(handle, at::cuda::getCurrentCUDAStream(x.device().index()).stream());
  TORCH_CHECK(s == CUDNN_STATUS_SUCCESS, "graph BatchNorm: cudnnSetStream failed: ", cudnnGetErrorString(s));
  return handle;
}

at::Tensor bytes(int64_t n, const at::Tensor& like) {
  return at::empty({std::max<int64_t>(n, 1)}, like.options().dtype(at::kByte).memory_format(c10::nullopt));
}

void execute(fe::graph::Graph& g, cudnnHandle_t handle, VariantPack& pack, int64_t workspace_bytes,
             const at::Tensor& like) {
  const at::Tensor workspace = bytes(workspace_bytes, like);
  check(g.execute(handle, pack, workspace.data_ptr()), "execute");
}

}  // namespace graph

namespace {

using namespace graph;

struct Forward {
  fe::graph::Graph graph;
  TensorAttr x, z, gamma, beta, running_mean, running_var, mean, inv_std, next_mean, next_var, y, mask;
  int64_t workspace = 0;
};

std::unique_ptr<Forward> make_forward(const at::Tensor& x, bool add, double momentum, double eps,
                                      cudnnHandle_t handle) {
  auto f = std::make_unique<Forward>();
  fe::graph::Graph& g = f->graph;
  start(g, x.scalar_type());
  const auto io = io_type(x.scalar_type());
  const int64_t c = x.size(1);
  f->x = nhwc(g, "x", x, io);
  f->gamma = per_channel(g, "gamma", c);
  f->beta = per_channel(g, "beta", c);
  f->running_mean = per_channel(g, "running_mean", c);
  f->running_var = per_channel(g, "running_var", c);
  TensorAttr epsilon = g.tensor(static_cast<float>(eps)), momentum_ = g.tensor(static_cast<float>(momentum));
  auto [bn, mean, inv_std, next_mean, next_var] = g.batchnorm(
      f->x, f->gamma, f->beta,
      fe::graph::Batchnorm_attributes().set_epsilon(epsilon).set_previous_running_stats(f->running_mean,
                                                                                         f->running_var, momentum_));
  for (const TensorAttr* t : {&mean, &inv_std, &next_mean, &next_var}) {
    (*t)->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  }
  f->mean = mean;
  f->inv_std = inv_std;
  f->next_mean = next_mean;
  f->next_var = next_var;
  TensorAttr pre = bn;
  if (add) {
    f->z = nhwc(g, "z", x, io);
    pre = g.pointwise(bn, f->z, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
  }
  f->y = g.pointwise(pre, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
  f->y->set_output(true).set_data_type(io);
  // The mask the backward needs, as NVIDIA's LayerNorm + ReLU bit-mask sample writes it (cuDNN >= 9.13).
  f->mask = g.pointwise(f->y, g.tensor(0.0f),
                        fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::CMP_GT).set_compute_data_type(
                            fe::DataType_t::FLOAT));
  f->mask->set_output(true).set_data_type(fe::DataType_t::BOOLEAN);
  build(g, handle);
  check(g.get_workspace_size(f->workspace), "workspace size");
  return f;
}

std::unique_ptr<Backward> make_backward(const at::Tensor& x, bool add, cudnnHandle_t handle) {
  auto b = std::make_unique<Backward>();
  fe::graph::Graph& g = b->graph;
  start(g, x.scalar_type());
  const auto io = io_type(x.scalar_type());
  const int64_t c = x.size(1);
  b->dy = nhwc(g, "dy", x, io);
  b->x = nhwc(g, "x", x, io);
  b->mask = nhwc(g, "mask", x, fe::DataType_t::BOOLEAN);
  b->gamma = per_channel(g, "gamma", c);
  b->mean = per_channel(g, "mean", c);
  b->inv_std = per_channel(g, "inv_std", c);
  // The gradient through the ReLU: also the gradient of the residual added before it.
  b->dz = g.pointwise(b->dy, b->mask, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
  b->dz->set_output(add).set_data_type(io);
  auto [dx, dgamma, dbeta] = g.batchnorm_backward(
      b->dz, b->x, b->gamma, fe::graph::Batchnorm_backward_attributes().set_saved_mean_and_inv_variance(b->mean, b->inv_std));
  dx->set_output(true).set_data_type(io);
  dgamma->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  dbeta->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  b->dx = dx;
  b->dgamma = dgamma;
  b->dbeta = dbeta;
  build(g, handle);
  check(g.get_workspace_size(b->workspace), "workspace size");
  return b;
}

// What graphs are built for: the device, the shape, dtype and residual; momentum and epsilon are constants inside
// them. Not the cuDNN handle: a graph built on one thread's handle runs on another's (the forward on the caller's,
// the backward on autograd's, a side's plans built ahead on the preparing thread's), never on two at once.
using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int, bool, double, double>;

struct Entry {
  std::unique_ptr<Forward> forward;
  std::unique_ptr<Backward> backward;
  std::string error;  // why cuDNN could not build them ("" if it could)
};

// The process's graphs, built on first use and kept (a built graph is only read afterwards), under one lock.
class Cache {
 public:
  // The forward graph, or nullptr and why not, built on `handle` if new. Its first use also builds the backward
  // graph: a cuDNN that cannot build either is found here, where the caller can still take the ...Ex calls.
  Forward* forward(const at::Tensor& x, bool add, double momentum, double eps, cudnnHandle_t handle,
                   std::string& error) {
    const std::lock_guard<std::mutex> lock(mutex_);
    Entry& e = entries_[key(x, add, momentum, eps)];
    if (!e.forward && e.error.empty()) {
      e.error = attempt([&] {
        if (!e.backward) e.backward = make_backward(x, add, handle);
        e.forward = make_forward(x, add, momentum, eps, handle);
      });
      if (!e.error.empty()) e.forward.reset();
    }
    error = e.error;
    return e.forward.get();
  }
  // The backward graph, built on `handle` if new; throws where cuDNN cannot build it (the forward's first use
  // built it, so only a failure of cuDNN itself lands here).
  Backward& backward(const at::Tensor& x, bool add, double momentum, double eps, cudnnHandle_t handle) {
    const std::lock_guard<std::mutex> lock(mutex_);
    Entry& e = entries_[key(x, add, momentum, eps)];
    if (!e.backward) {
      const std::string error = attempt([&] { e.backward = make_backward(x, add, handle); });
      TORCH_CHECK(error.empty(), "graph BatchNorm backward: ", error);
    }
    return *e.backward;
  }

  // Builds on `handle` the graphs of every shape built so far whose side `side` maps to another one, outside the
  // lock: the training step may use the others meanwhile.
  void build_ahead(const SideMap& side, cudnnHandle_t handle) {
    std::vector<Key> wanted;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      wanted = keys_ahead(entries_, side, [](const Key&, const Entry& e) { return e.forward != nullptr; });
    }
    for (const Key& k : wanted) {
      const auto [device, n, c, h, w, dtype, add, momentum, eps] = k;
      // Only the sizes and dtype are read: a meta tensor holds no memory.
      const at::Tensor x = at::empty({n, c, h, w}, at::TensorOptions().dtype(static_cast<at::ScalarType>(dtype))
                                                       .device(at::kMeta));
      Entry built;
      built.error = attempt([&] {
        built.backward = make_backward(x, add, handle);
        built.forward = make_forward(x, add, momentum, eps, handle);
      });
      if (!built.error.empty()) continue;  // left to the step's first use, which says why
      const std::lock_guard<std::mutex> lock(mutex_);
      Entry& e = entries_[k];
      if (!e.forward && e.error.empty()) e = std::move(built);
    }
  }

 private:
  static Key key(const at::Tensor& x, bool add, double momentum, double eps) {
    return Key{x.device().index(), x.size(0), x.size(1), x.size(2), x.size(3), static_cast<int>(x.scalar_type()),
               add, momentum, eps};
  }
  std::mutex mutex_;
  std::map<Key, Entry> entries_;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: graphs must not outlive cuDNN at exit
  return *c;
}

// The forward graph writes y, the batch's mean and inverse standard deviation, the new running statistics
// (copied back into the module's) and a ReLU bit mask (y > 0, one bit per element); the backward graph multiplies
// dy by the mask (that product is also the shortcut's gradient) and runs BatchNorm's backward. Graphs are built
// once per shape, dtype and constants, on first use (or ahead of a new side), and kept. Where it pays:
// docs/training-step.md.
class GraphBatchNormFunction : public torch::autograd::Function<GraphBatchNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const std::optional<at::Tensor>& residual_or_none, const at::Tensor& weight,
                            const at::Tensor& bias, at::Tensor running_mean, at::Tensor running_var, double momentum,
                            double eps, Forward* graph, cudnnHandle_t handle) {
    const bool add = residual_or_none.has_value();
    Forward& f = *graph;
    at::Tensor y = at::empty_like(x);  // keeps channels_last
    at::Tensor mean = at::empty_like(running_mean), inv_std = at::empty_like(running_var);
    at::Tensor mask = bytes((x.numel() + 7) / 8, x);  // one bit per element, channels fastest (as x)
    // The new running statistics go to their own buffers and are copied back (two device-to-device copies): the
    // graph API has separate tensors for the old and new ones, and nothing says that one buffer may be both.
    at::Tensor next_mean = at::empty_like(running_mean), next_var = at::empty_like(running_var);
    VariantPack pack{{f.x, x.data_ptr()},
                     {f.gamma, weight.data_ptr()},
                     {f.beta, bias.data_ptr()},
                     {f.running_mean, running_mean.data_ptr()},
                     {f.running_var, running_var.data_ptr()},
                     {f.mean, mean.data_ptr()},
                     {f.inv_std, inv_std.data_ptr()},
                     {f.next_mean, next_mean.data_ptr()},
                     {f.next_var, next_var.data_ptr()},
                     {f.y, y.data_ptr()},
                     {f.mask, mask.data_ptr()}};
    if (add) pack[f.z] = residual_or_none->data_ptr();
    execute(f.graph, handle, pack, f.workspace, x);
    running_mean.copy_(next_mean);
    running_var.copy_(next_var);
    ctx->save_for_backward({x, weight, mean, inv_std, mask});
    ctx->saved_data["residual"] = add;
    ctx->saved_data["momentum"] = momentum;
    ctx->saved_data["eps"] = eps;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &inv_std = saved[3], &mask = saved[4];
    const bool add = ctx->saved_data["residual"].toBool();
    const at::Tensor dy = grad_outputs[0].contiguous(c10::MemoryFormat::ChannelsLast);
    const cudnnHandle_t handle = handle_on(x);
    Backward& b = cache().backward(x, add, ctx->saved_data["momentum"].toDouble(), ctx->saved_data["eps"].toDouble(),
                                   handle);
    at::Tensor dx = at::empty_like(x), dz = add ? at::empty_like(x) : at::Tensor();
    at::Tensor dweight = at::empty_like(weight), dbias = at::empty_like(weight);
    VariantPack pack{{b.dy, dy.data_ptr()},           {b.x, x.data_ptr()},          {b.mask, mask.data_ptr()},
                     {b.gamma, weight.data_ptr()},     {b.mean, mean.data_ptr()},    {b.inv_std, inv_std.data_ptr()},
                     {b.dx, dx.data_ptr()},            {b.dgamma, dweight.data_ptr()}, {b.dbeta, dbias.data_ptr()}};
    if (add) pack[b.dz] = dz.data_ptr();
    execute(b.graph, handle, pack, b.workspace, x);
    torch::autograd::variable_list grads(10);  // one per forward argument; the last six have none
    grads[0] = dx;
    grads[1] = dz;
    grads[2] = dweight;
    grads[3] = dbias;
    return grads;
  }
};

}  // namespace

namespace graph {

Backward& graph_backward(const at::Tensor& x, bool add, double momentum, double eps, cudnnHandle_t handle) {
  return cache().backward(x, add, momentum, eps, handle);
}

void build_batch_norm_ahead(const SideMap& side, cudnnHandle_t handle) { cache().build_ahead(side, handle); }

}  // namespace graph

std::string graph_batch_norm_unavailable_reason() { return ""; }

at::Tensor graph_batch_norm(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& running_mean, const at::Tensor& running_var,
                            double momentum, double eps, std::string& why) {
  const cudnnHandle_t handle = handle_on(x);
  Forward* graph = cache().forward(x, residual.defined(), momentum, eps, handle, why);
  if (!graph) return at::Tensor();
  const std::optional<at::Tensor> z = residual.defined() ? std::optional<at::Tensor>(residual) : std::nullopt;
  return GraphBatchNormFunction::apply(x, z, weight, bias, running_mean, running_var, momentum, eps, graph, handle);
}

}  // namespace pinfeed::model::detail

namespace pinfeed::model {

PlanCost build_graph_plans_ahead(int64_t from, int64_t to, c10::Device device) {
  using namespace detail::graph;
  const PlanCost before = plan_cost();
  const c10::cuda::CUDAGuard device_guard(device);
  const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, device.index());
  const c10::cuda::CUDAStreamGuard stream_guard(stream);
  // One handle per device for this purpose, created once and kept (the plans built on it keep pointing at it);
  // one thread at a time builds ahead.
  static std::mutex handles_mutex;
  static std::map<int, cudnnHandle_t> handles;
  cudnnHandle_t handle = nullptr;
  {
    const std::lock_guard<std::mutex> lock(handles_mutex);
    cudnnHandle_t& h = handles[device.index()];
    if (!h) TORCH_CHECK(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS, "graph BatchNorm: cudnnCreate failed");
    handle = h;
  }
  TORCH_CHECK(cudnnSetStream(handle, stream.stream()) == CUDNN_STATUS_SUCCESS,
              "graph BatchNorm: cudnnSetStream failed");
  const SideMap side = [from, to](int64_t s) -> std::optional<int64_t> {
    for (int64_t a = from, b = to;; a = (a + 1) / 2, b = (b + 1) / 2) {
      if (s == a) return b;
      if (a <= 1) return std::nullopt;
    }
  };
  build_batch_norm_ahead(side, handle);
  build_conv_units_ahead(side, handle);
  stream.synchronize();
  return plan_cost() - before;
}

}  // namespace pinfeed::model
