#include "model/graph_plans.h"

#include <atomic>

namespace pinfeed::model {
namespace {
std::atomic<int64_t> nanoseconds{0};
std::atomic<int64_t> graphs{0};
}  // namespace

PlanCost plan_cost() { return {static_cast<double>(nanoseconds.load()) * 1e-9, graphs.load()}; }

void add_plan_cost(double seconds) {
  nanoseconds += static_cast<int64_t>(seconds * 1e9);
  ++graphs;
}

}  // namespace pinfeed::model
