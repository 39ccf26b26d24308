// The cuDNN graph routes' plans (model.bn_graph: batch_norm_graph.cpp, conv_bn_add_relu.cpp): what building them
// costs, and building a new side's ahead of its first step (docs/resolution-schedule.md#the-cost-of-a-first-switch).
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>

namespace pinfeed::model {

struct PlanCost {
  double seconds = 0;
  int64_t graphs = 0;
  PlanCost operator-(const PlanCost& o) const { return {seconds - o.seconds, graphs - o.graphs}; }
};

PlanCost plan_cost();  // this process's totals so far, every thread's
void add_plan_cost(double seconds);

// Adds its lifetime to plan_cost() as one graph built.
class PlanCostTimer {
 public:
  PlanCostTimer() : t0_(std::chrono::steady_clock::now()) {}
  ~PlanCostTimer() { add_plan_cost(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count()); }
  PlanCostTimer(const PlanCostTimer&) = delete;
  PlanCostTimer& operator=(const PlanCostTimer&) = delete;

 private:
  std::chrono::steady_clock::time_point t0_;
};

// Builds, on the calling thread, the plans a training step at side `to` will ask the graph routes for: those built
// so far at side `from`, each feature map's side mapped as ResNet's stride-2 layers halve it (rounded up). Meant
// for a thread beside the training step: its own cuDNN handle and CUDA stream, the routes' caches under their
// locks. A plan that exists is kept; a guess no step asks for costs only its build; the conv3 route's units only
// with cudnn_benchmark off (their timing would measure the step beside them). Nothing in a build without the
// routes. Returns plan_cost()'s growth while it ran: its own builds, and any another thread made meanwhile (the
// training thread's eager last batch of an epoch at a shape new to the run).
PlanCost build_graph_plans_ahead(int64_t from, int64_t to, c10::Device device);

}  // namespace pinfeed::model
