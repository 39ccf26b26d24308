// The time the cuDNN graph routes (batch_norm_graph.cpp, conv_bn_add_relu.cpp) spend building plans: what a new
// side's first steps pay on the CPU before the CUDA graph is captured (docs/resolution-schedule.md).
#pragma once

#include <chrono>
#include <cstdint>

namespace pinfeed::model {

struct PlanCost {
  double seconds = 0;
  int64_t graphs = 0;
  PlanCost operator-(const PlanCost& o) const { return {seconds - o.seconds, graphs - o.graphs}; }
};

PlanCost plan_cost();  // this process's totals so far
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

}  // namespace pinfeed::model
