// What the two cuDNN graph routes (batch_norm_graph.cpp, conv_bn_add_relu.cpp) share: the frontend and its helpers.
#pragma once

// The frontend resolves cuDNN, the CUDA runtime and (for engines pinfeed never asks for) the driver and NVRTC
// through dlsym at run time: linking libcuda would stop pinfeed from starting on machines without a driver.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB  // no serialisation: it would need nlohmann-json in these files' compile
#include <cudnn_frontend.h>

#include <ATen/core/Tensor.h>

#include "model/graph_plans.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace pinfeed::model::detail::graph {

namespace fe = cudnn_frontend;
using TensorAttr = std::shared_ptr<fe::graph::Tensor_attributes>;
using VariantPack = std::unordered_map<TensorAttr, void*>;

void check(fe::error_t status, const char* what);  // TORCH_CHECK with cuDNN's message
// Builds the graph's plan: cuDNN's heuristics, then its fallback list; the first plan that builds is kept.
void build(fe::graph::Graph& g, cudnnHandle_t handle);
fe::DataType_t io_type(at::ScalarType t);  // bf16 or fp16, else TORCH_CHECK fails
// (N, C, H, W) in NHWC memory: what channels_last is.
TensorAttr nhwc(fe::graph::Graph& g, const char* name, const at::Tensor& x, fe::DataType_t type);
TensorAttr per_channel(fe::graph::Graph& g, const char* name, int64_t c);  // (1, C, 1, 1) float32
void start(fe::graph::Graph& g, at::ScalarType dtype);  // io dtype; intermediates and compute in float32
// Runs `build`; "" if it returned, else why not: an older cuDNN, a shape no engine takes, a symbol the frontend
// did not find.
std::string attempt(const std::function<void()>& build);
cudnnHandle_t handle_on(const at::Tensor& x);  // this thread's cuDNN handle, on x's current stream
at::Tensor bytes(int64_t n, const at::Tensor& like);  // at least one byte, on like's device
void execute(fe::graph::Graph& g, cudnnHandle_t handle, VariantPack& pack, int64_t workspace_bytes,
             const at::Tensor& like);

// The graph BatchNorm's backward: dz = dy * mask (the ReLU's; also the residual's gradient), then BN's backward.
struct Backward {
  fe::graph::Graph graph;
  TensorAttr dy, x, mask, gamma, mean, inv_std, dz, dx, dgamma, dbeta;
  int64_t workspace = 0;
};
// The process's backward graph for x's shape and dtype, the residual, momentum and epsilon, built on first use
// (on `handle`) and kept; throws where cuDNN cannot build it.
Backward& graph_backward(const at::Tensor& x, bool add, double momentum, double eps, cudnnHandle_t handle);

// A feature map's side at the side being prepared, from its side at the one trained now; none if it has no match.
using SideMap = std::function<std::optional<int64_t>(int64_t)>;
// The keys of the graphs built so far (`built`: a map whose keys hold H and W at positions 3 and 4) that `take`
// accepts, at the sides `side` maps theirs to, where that key is not built yet: what to build ahead of a new side.
template <class Map, class Take>
std::vector<typename Map::key_type> keys_ahead(const Map& built, const SideMap& side, Take take) {
  std::vector<typename Map::key_type> wanted;
  for (const auto& [k, v] : built) {
    const std::optional<int64_t> h = side(std::get<3>(k)), w = side(std::get<4>(k));
    if (!h || !w || !take(k, v)) continue;
    typename Map::key_type next = k;
    std::get<3>(next) = *h;
    std::get<4>(next) = *w;
    if (!built.count(next)) wanted.push_back(next);
  }
  return wanted;
}
// Each route's graphs ahead of a new side (model/graph_plans.h's build_graph_plans_ahead).
void build_batch_norm_ahead(const SideMap& side, cudnnHandle_t handle);
void build_conv_units_ahead(const SideMap& side, cudnnHandle_t handle);

}  // namespace pinfeed::model::detail::graph
