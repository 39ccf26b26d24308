// pinfeed train's run.trace_steps: where the range may lie, and opening the trace.
#include "app/train/train_trace.h"

#include "app/config/config.h"
#include "common/log.h"

namespace pinfeed::app {

void check_trace_steps(const Plan& plan, const engine::StepRange& s, int64_t steps_per_epoch) {
  if (steps_per_epoch <= 0) return;  // nothing to train, nothing to trace
  const std::string at = location_of(plan, "run.trace_steps") + ": run.trace_steps = \"" + s.text() + "\"";
  const int64_t total = plan.schedule.epochs * steps_per_epoch;
  if (s.last >= total) {
    throw ConfigError(at + " goes past this run's last step, " + std::to_string(total - 1) + " (" +
                      std::to_string(plan.schedule.epochs) + " epochs of " + std::to_string(steps_per_epoch) +
                      " steps, numbered from 0)");
  }
  const int64_t epoch = s.first / steps_per_epoch;
  if (s.last / steps_per_epoch != epoch) {
    throw ConfigError(at + " crosses the end of epoch " + std::to_string(epoch + 1) + " (its steps are " +
                      std::to_string(epoch * steps_per_epoch) + "-" + std::to_string((epoch + 1) * steps_per_epoch - 1) +
                      "); trace steps of one epoch (the evaluation between two would be traced too)");
  }
}

std::unique_ptr<engine::StepTrace> open_train_trace(const Plan& plan, RunOutputs& out, const std::string& mode,
                                            int64_t first_step) {
  const engine::StepRange& s = *plan.run.trace_steps;
  auto trace = std::make_unique<engine::StepTrace>(s, out.path("trace_steps_" + s.text() + ".json"), plan.device,
                                           nlohmann::json{{"command", "train"}, {"mode", mode}});
  if (first_step > s.last) {
    log::warn("run.trace_steps = \"" + s.text() + "\": this run resumes after step " + std::to_string(s.last) +
              ", nothing to trace");
  } else {
    log::info("tracing steps " + s.text() + " into " + trace->path());
  }
  return trace;
}

}  // namespace pinfeed::app
