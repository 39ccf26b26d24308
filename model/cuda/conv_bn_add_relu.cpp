// A block's conv3 + BN + add + ReLU with BN's statistics from the convolution (GraphBatchNorm::kConv), fp16.
#include "model/cuda/batch_norm_graph.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "model/cuda/cudnn_graph.h"

namespace pinfeed::model::detail {
namespace {

using namespace graph;

// Forward: the 1x1 convolution writes y and BN's per-channel sum and sum of squares (genstats), BN finalize turns
// them into the batch's mean and inverse standard deviation, a scale and a bias, and the new running statistics,
// and one pass writes relu(y * scale + bias + residual) and its ReLU bit mask: no statistics pass over y
// (docs/training-step.md). Backward: the graph BatchNorm's backward graph on y, then ATen's convolution backward.

// relu(y * scale + bias + z), with the ReLU's bit mask for the backward.
struct Apply {
  fe::graph::Graph graph;
  TensorAttr y, z, scale, bias, out, mask;
  int64_t workspace = 0;
};

struct ConvStats {
  fe::graph::Graph conv, finalize;
  TensorAttr x, w, y, sum, sq_sum;  // conv
  TensorAttr f_sum, f_sq_sum, gamma, beta, running_mean, running_var, scale, bias, mean, inv_std, next_mean,
      next_var;  // finalize
  std::unique_ptr<Apply> apply;
  int64_t conv_workspace = 0, finalize_workspace = 0;
};

// The convolution with genstats: cuDNN's candidate plans (heuristics, then fallback; at most 8, as the layer
// benchmark timed them) built one by one, each timed on these tensors, the fastest kept, as cudnn_benchmark does
// for ATen's own convolutions; with cudnn_benchmark off, the first that runs (the same one in every process, so
// that a resumed run replays the kernels of the run it continues). Not Graph::autotune: its workspace query reads
// plans that failed to build.
void make_conv(ConvStats& u, const at::Tensor& x, const at::Tensor& w, cudnnHandle_t handle) {
  const PlanCostTimer timer;
  fe::graph::Graph& g = u.conv;
  start(g, x.scalar_type());
  const auto io = io_type(x.scalar_type());
  u.x = nhwc(g, "x", x, io);
  u.w = nhwc(g, "w", w, io);  // (K, C, 1, 1)
  u.y = g.conv_fprop(u.x, u.w,
                     fe::graph::Conv_fprop_attributes().set_padding({0, 0}).set_stride({1, 1}).set_dilation({1, 1}));
  u.y->set_output(true).set_data_type(io);
  auto [sum, sq_sum] = g.genstats(u.y, fe::graph::Genstats_attributes());
  sum->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  sq_sum->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  u.sum = sum;
  u.sq_sum = sq_sum;
  check(g.validate(), "validate");
  check(g.build_operation_graph(handle), "operation graph");
  check(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "execution plans");
  check(g.check_support(handle), "support");
  const at::Tensor y = at::empty({x.size(0), w.size(0), x.size(2), x.size(3)},
                                 x.options().memory_format(c10::MemoryFormat::ChannelsLast));
  const at::Tensor stats = at::zeros({2, w.size(0)}, x.options().dtype(at::kFloat).memory_format(c10::nullopt));
  VariantPack pack{{u.x, x.data_ptr()},
                   {u.w, w.data_ptr()},
                   {u.y, y.data_ptr()},
                   {u.sum, stats[0].data_ptr()},
                   {u.sq_sum, stats[1].data_ptr()}};
  const c10::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream(x.device().index());
  int64_t best = -1;
  float best_ms = 0;
  std::string last_error = "no plan";
  for (int64_t i = 0; i < std::min<int64_t>(g.get_execution_plan_count(), 8); ++i) {
    int64_t bytes_needed = 0;
    if (auto e = g.build_plan_at_index(handle, i); e.is_bad()) {
      last_error = e.get_message();
      continue;
    }
    if (g.get_workspace_size_plan_at_index(i, bytes_needed).is_bad()) continue;
    const at::Tensor workspace = bytes(bytes_needed, x);
    if (auto e = g.execute_plan_at_index(handle, pack, workspace.data_ptr(), i); e.is_bad()) {  // also a warm-up
      (void)cudaGetLastError();  // a launch that failed must not surface later as someone else's error
      last_error = e.get_message();
      continue;
    }
    if (!at::globalContext().benchmarkCuDNN()) {
      best = i;
      break;
    }
    at::cuda::CUDAEvent start_event(cudaEventDefault), end_event(cudaEventDefault);
    float ms = std::numeric_limits<float>::infinity();
    for (int run = 0; run < 3; ++run) {  // the best of 3 runs that succeed
      start_event.record(stream);
      const bool ok = g.execute_plan_at_index(handle, pack, workspace.data_ptr(), i).is_good();
      end_event.record(stream);
      end_event.synchronize();
      if (!ok) {
        (void)cudaGetLastError();
        continue;
      }
      ms = std::min(ms, start_event.elapsed_time(end_event));
    }
    if (ms == std::numeric_limits<float>::infinity()) continue;  // ran once, then never again: not a candidate
    if (best < 0 || ms < best_ms) {
      best = i;
      best_ms = ms;
    }
  }
  TORCH_CHECK(best >= 0, "graph BatchNorm: no plan of the convolution with statistics ran: ", last_error);
  check(g.build_plan_at_index(handle, best), "plan build");  // makes it the plan execute() runs
  check(g.get_workspace_size(u.conv_workspace), "workspace size");
}

// count: the elements per channel the statistics were summed over (N * H * W).
void make_finalize(ConvStats& u, int64_t count, int64_t k, double momentum, double eps, cudnnHandle_t handle) {
  fe::graph::Graph& g = u.finalize;
  start(g, at::kHalf);  // every tensor here is float32; the io type is only the default
  u.f_sum = per_channel(g, "sum", k);
  u.f_sq_sum = per_channel(g, "sq_sum", k);
  u.gamma = per_channel(g, "gamma", k);
  u.beta = per_channel(g, "beta", k);
  u.running_mean = per_channel(g, "running_mean", k);
  u.running_var = per_channel(g, "running_var", k);
  TensorAttr epsilon = g.tensor(static_cast<float>(eps)), momentum_ = g.tensor(static_cast<float>(momentum)),
             accumulated = g.tensor(count);
  auto [scale, bias, mean, inv_std, next_mean, next_var] = g.bn_finalize(
      u.f_sum, u.f_sq_sum, u.gamma, u.beta, epsilon, accumulated,
      fe::graph::BN_finalize_attributes().set_previous_running_stats(u.running_mean, u.running_var, momentum_));
  for (const TensorAttr* t : {&scale, &bias, &mean, &inv_std, &next_mean, &next_var}) {
    (*t)->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  }
  u.scale = scale;
  u.bias = bias;
  u.mean = mean;
  u.inv_std = inv_std;
  u.next_mean = next_mean;
  u.next_var = next_var;
  build(g, handle);
  check(g.get_workspace_size(u.finalize_workspace), "workspace size");
}

std::unique_ptr<Apply> make_apply(const at::Tensor& y, cudnnHandle_t handle) {
  auto a = std::make_unique<Apply>();
  fe::graph::Graph& g = a->graph;
  start(g, y.scalar_type());
  const auto io = io_type(y.scalar_type());
  a->y = nhwc(g, "y", y, io);
  a->z = nhwc(g, "z", y, io);
  a->scale = per_channel(g, "scale", y.size(1));
  a->bias = per_channel(g, "bias", y.size(1));
  using Mode = fe::PointwiseMode_t;
  const auto op = [&g](const TensorAttr& p, const TensorAttr& q, Mode mode) {
    return g.pointwise(p, q, fe::graph::Pointwise_attributes().set_mode(mode));
  };
  const TensorAttr pre = op(op(op(a->y, a->scale, Mode::MUL), a->bias, Mode::ADD), a->z, Mode::ADD);
  a->out = g.pointwise(pre, fe::graph::Pointwise_attributes().set_mode(Mode::RELU_FWD));
  a->out->set_output(true).set_data_type(io);
  // The mask as the graph BatchNorm's forward writes it (its backward graph reads it).
  a->mask = g.pointwise(a->out, g.tensor(0.0f),
                        fe::graph::Pointwise_attributes().set_mode(Mode::CMP_GT).set_compute_data_type(
                            fe::DataType_t::FLOAT));
  a->mask->set_output(true).set_data_type(fe::DataType_t::BOOLEAN);
  build(g, handle);
  check(g.get_workspace_size(a->workspace), "workspace size");
  return a;
}

// All of a conv3 unit's graphs for x (N, C, H, W) and w (K, C, 1, 1), built on `handle`; the backward's too: a cuDNN
// that cannot build it (or the apply graph's mask) is found where the caller can still take the other route.
std::unique_ptr<ConvStats> make_unit(const at::Tensor& x, const at::Tensor& w, double momentum, double eps,
                                     cudnnHandle_t handle) {
  auto u = std::make_unique<ConvStats>();
  make_conv(*u, x, w, handle);
  make_finalize(*u, x.size(0) * x.size(2) * x.size(3), w.size(0), momentum, eps, handle);
  const at::Tensor y = at::empty({x.size(0), w.size(0), x.size(2), x.size(3)},
                                 x.options().memory_format(c10::MemoryFormat::ChannelsLast));
  u->apply = make_apply(y, handle);
  graph_backward(y, /*add=*/true, momentum, eps, handle);
  return u;
}

// The conv3 units' graphs: built (and the convolution autotuned) on first use per device, x's shape, output
// channels, momentum and epsilon (not per cuDNN handle: as the graph BatchNorm's), and kept, under one lock (taken
// before graph_backward's, never after); or why cuDNN could not build them.
class ConvStatsCache {
 public:
  ConvStats* get(const at::Tensor& x, const at::Tensor& w, double momentum, double eps, cudnnHandle_t handle,
                 std::string& error) {
    const std::lock_guard<std::mutex> lock(mutex_);
    Slot& s = slots_[Key{x.device().index(), x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), momentum, eps,
                         at::globalContext().benchmarkCuDNN()}];
    if (!s.unit && s.error.empty()) s.error = attempt([&] { s.unit = make_unit(x, w, momentum, eps, handle); });
    error = s.error;
    return s.unit.get();
  }

  // As the graph BatchNorm's build_ahead, for units whose convolution takes the first plan that runs
  // (cudnn_benchmark off): timing candidates beside the training step would pick by its noise. The convolution
  // runs once, on zeros, on the calling thread's current stream.
  void build_ahead(const SideMap& side, cudnnHandle_t handle) {
    std::vector<Key> wanted;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      // Built units whose convolution took the first plan that runs (the key's last: cudnn_benchmark).
      wanted = keys_ahead(slots_, side, [](const Key& k, const Slot& s) { return s.unit && !std::get<8>(k); });
    }
    for (const Key& k : wanted) {
      const auto [device, n, c, h, w, out, momentum, eps, benchmark] = k;
      const auto options = at::TensorOptions().dtype(at::kHalf).device(at::Device(at::kCUDA, device));
      const at::Tensor x = at::zeros({n, c, h, w}, options.memory_format(c10::MemoryFormat::ChannelsLast));
      const at::Tensor weights = at::zeros({out, c, 1, 1}, options.memory_format(c10::MemoryFormat::ChannelsLast));
      std::unique_ptr<ConvStats> unit;
      if (!attempt([&] { unit = make_unit(x, weights, momentum, eps, handle); }).empty()) continue;
      const std::lock_guard<std::mutex> lock(mutex_);
      Slot& s = slots_[k];
      if (!s.unit && s.error.empty()) s.unit = std::move(unit);
    }
  }

 private:
  // The last: cudnn_benchmark (it chooses how the convolution's plan is picked).
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, double, double, bool>;
  struct Slot {
    std::unique_ptr<ConvStats> unit;
    std::string error;  // why cuDNN could not build them ("" if it could)
  };
  std::mutex mutex_;
  std::map<Key, Slot> slots_;
};

ConvStatsCache& conv_stats_cache() {
  static ConvStatsCache* c = new ConvStatsCache();  // never destroyed, as the graph BatchNorm's cache
  return *c;
}

class ConvBnAddReluFunction : public torch::autograd::Function<ConvBnAddReluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& residual, const at::Tensor& weight, const at::Tensor& bias,
                            at::Tensor running_mean, at::Tensor running_var, double momentum, double eps,
                            ConvStats* unit, cudnnHandle_t handle) {
    ConvStats& u = *unit;
    const int64_t k = w.size(0);
    at::Tensor y = at::empty({x.size(0), k, x.size(2), x.size(3)},
                             x.options().memory_format(c10::MemoryFormat::ChannelsLast));
    // Per channel: sum, sum of squares, scale, bias, mean, inverse std, next running mean and variance.
    const at::Tensor stats = at::empty({8, k}, running_mean.options());
    stats.narrow(0, 0, 2).zero_();  // sum and sum of squares: NVIDIA's genstats test starts them at zero
    VariantPack conv{{u.x, x.data_ptr()},
                     {u.w, w.data_ptr()},
                     {u.y, y.data_ptr()},
                     {u.sum, stats[0].data_ptr()},
                     {u.sq_sum, stats[1].data_ptr()}};
    execute(u.conv, handle, conv, u.conv_workspace, x);
    VariantPack finalize{{u.f_sum, stats[0].data_ptr()},
                         {u.f_sq_sum, stats[1].data_ptr()},
                         {u.gamma, weight.data_ptr()},
                         {u.beta, bias.data_ptr()},
                         {u.running_mean, running_mean.data_ptr()},
                         {u.running_var, running_var.data_ptr()},
                         {u.scale, stats[2].data_ptr()},
                         {u.bias, stats[3].data_ptr()},
                         {u.mean, stats[4].data_ptr()},
                         {u.inv_std, stats[5].data_ptr()},
                         {u.next_mean, stats[6].data_ptr()},
                         {u.next_var, stats[7].data_ptr()}};
    execute(u.finalize, handle, finalize, u.finalize_workspace, x);
    running_mean.copy_(stats[6]);  // as the graph BatchNorm: old and new statistics in separate buffers
    running_var.copy_(stats[7]);
    at::Tensor out = at::empty_like(y);
    Apply& a = *u.apply;
    VariantPack apply{{a.y, y.data_ptr()},
                      {a.z, residual.data_ptr()},
                      {a.scale, stats[2].data_ptr()},
                      {a.bias, stats[3].data_ptr()},
                      {a.out, out.data_ptr()}};
    // A bit per element, as the graph BatchNorm's norm engine writes it: the backward graph is that BatchNorm's,
    // and the exact shortcut gradient of the GPU test (dz == dy * (y > 0)) holds only if this pass writes the
    // bits it reads (a byte per element read as bits would zero 7 of every 8 gradients).
    const at::Tensor mask = bytes((y.numel() + 7) / 8, y);
    apply[a.mask] = mask.data_ptr();
    execute(a.graph, handle, apply, a.workspace, x);
    ctx->save_for_backward({x, w, y, weight, stats[4], stats[5], mask});
    ctx->saved_data["momentum"] = momentum;
    ctx->saved_data["eps"] = eps;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &y = saved[2], &weight = saved[3], &mean = saved[4],
                     &inv_std = saved[5], &mask = saved[6];
    const at::Tensor dout = grad_outputs[0].contiguous(c10::MemoryFormat::ChannelsLast);
    const cudnnHandle_t handle = handle_on(y);
    Backward& b = graph_backward(y, /*add=*/true, ctx->saved_data["momentum"].toDouble(),
                                   ctx->saved_data["eps"].toDouble(), handle);
    at::Tensor dy = at::empty_like(y), dz = at::empty_like(y);
    at::Tensor dweight = at::empty_like(weight), dbias = at::empty_like(weight);
    VariantPack pack{{b.dy, dout.data_ptr()},        {b.x, y.data_ptr()},         {b.mask, mask.data_ptr()},
                     {b.gamma, weight.data_ptr()},    {b.mean, mean.data_ptr()},   {b.inv_std, inv_std.data_ptr()},
                     {b.dx, dy.data_ptr()},           {b.dz, dz.data_ptr()},       {b.dgamma, dweight.data_ptr()},
                     {b.dbeta, dbias.data_ptr()}};
    execute(b.graph, handle, pack, b.workspace, y);
    auto [dx, dw, unused] = at::convolution_backward(dy, x, w, std::nullopt, /*stride=*/{1, 1}, /*padding=*/{0, 0},
                                                     /*dilation=*/{1, 1}, /*transposed=*/false,
                                                     /*output_padding=*/{0, 0}, /*groups=*/1, {true, true, false});
    torch::autograd::variable_list grads(11);  // one per forward argument; the last six have none
    grads[0] = dx;
    grads[1] = dw;
    grads[2] = dz;
    grads[3] = dweight;
    grads[4] = dbias;
    return grads;
  }
};

}  // namespace

namespace graph {
void build_conv_units_ahead(const SideMap& side, cudnnHandle_t handle) { conv_stats_cache().build_ahead(side, handle); }
}  // namespace graph

at::Tensor graph_conv_bn_add_relu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& residual,
                                  const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& running_mean,
                                  const at::Tensor& running_var, double momentum, double eps, std::string& why) {
  if (x.scalar_type() != at::kHalf || w.scalar_type() != at::kHalf) {
    why = "fp16 only (cuDNN 9.19 has no bf16 plan for a convolution with BN statistics); got " +
          std::string(c10::toString(x.scalar_type()));
    return at::Tensor();
  }
  // With the route, a resumed run under deterministic kernels did not go on bit for bit as the uninterrupted run
  // (GPU test); the likeliest cause, not confirmed, is the order in which the convolution's epilogue adds up the
  // statistics. So under them, as ATen leaves out its nondeterministic algorithms, the caller's other route.
  if (at::globalContext().deterministicCuDNN() || at::globalContext().deterministicAlgorithms()) {
    why = "deterministic kernels were asked for, and this route's results are not reproducible bit for bit";
    return at::Tensor();
  }
  const cudnnHandle_t handle = handle_on(x);
  ConvStats* unit = conv_stats_cache().get(x, w, momentum, eps, handle, why);
  if (!unit) return at::Tensor();
  return ConvBnAddReluFunction::apply(x, w, residual, weight, bias, running_mean, running_var, momentum, eps, unit,
                                      handle);
}

}  // namespace pinfeed::model::detail
