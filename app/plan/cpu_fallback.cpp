#include "app/plan/cpu_fallback.h"

#include <string>
#include <utility>

#include "common/log.h"
#include "pipeline/transfer/options.h"

namespace pinfeed::app {
namespace {

// A key whose value only CUDA runs, and what the CPU runs instead (written into the plan's key field, so that
// the run folder's config.toml records what ran).
struct CpuFallback {
  const char* key;
  bool training_only;  // evaluation never uses it: it takes the CPU's value without a word
  bool (*asked)(const Plan&);
  void (*instead)(Plan&);
  const char* running;  // what runs instead, after "training " or "evaluating "
};

const CpuFallback kCpuFallbacks[] = {
    {"train.precision", false, [](const Plan& p) { return engine::autocast_dtype(p.step.precision).has_value(); },
     [](Plan& p) { p.step.precision = engine::Precision::kFp32; }, "in fp32"},  // pinfeed's autocast is CUDA's
    {"train.cuda_graph", true, [](const Plan& p) { return p.train.cuda_graph == true; },
     [](Plan& p) { p.train.cuda_graph = false; }, "eagerly"},
    {"model.fused_bn", true, [](const Plan& p) { return p.model.fused_bn == true; },
     [](Plan& p) { p.model.fused_bn = false; }, "with ATen's BatchNorm"},
    {"model.bn_graph", true,
     [](const Plan& p) { return p.model.bn_graph.has_value() && *p.model.bn_graph != model::GraphBatchNorm::kNone; },
     [](Plan& p) { p.model.bn_graph = model::GraphBatchNorm::kNone; }, "with ATen's BatchNorm"},
    {"model.max_pool", true, [](const Plan& p) { return p.model.stem_max_pool == true; },
     [](Plan& p) { p.model.stem_max_pool = false; }, "with ATen's max pool"},
    {"model.pad_input", false, [](const Plan& p) { return p.model.pad_input == true; },
     [](Plan& p) { p.model.pad_input = false; }, "on float32 RGB input"},
    {"data.decoder", false, [](const Plan& p) { return p.dataset.decoder == pipeline::Decoder::kNvjpeg; },
     [](Plan& p) { p.dataset.decoder = pipeline::Decoder::kCpu; }, "with the JPEGs decoded on the CPU"},
};

}  // namespace

// On the CPU there is no transfer to overlap: the flags that need CUDA (a preset's, or written one by one) give
// way to mode pageable, said once, as a pinned ring over its budget does (the feeder's fallback).
void fall_back_to_pageable(Plan& p) {
  if (p.device.is_cuda() || !pipeline::check_options(p.pipeline, /*device_is_cuda=*/false)) return;
  std::string what;
  if (p.pipeline.mode) {
    what = std::string("pipeline.mode = \"") + pipeline::preset_of(*p.pipeline.mode).name + "\"";
  } else {
    for (const auto& [flag, on] : {std::pair<const char*, bool>{"pin_memory", p.pipeline.pin_memory},
                                   {"non_blocking", p.pipeline.non_blocking}, {"dual_stream", p.pipeline.dual_stream}}) {
      if (on) what += (what.empty() ? "pipeline." : ", pipeline.") + std::string(flag) + " = true";
    }
  }
  const std::string key = p.pipeline.mode ? "pipeline.mode" : pipeline::check_options(p.pipeline, false).key;
  if (p.dist_env.rank == 0) {
    log::warn(location_of(p, key) + ": " + what + " needs a CUDA device (device is cpu): running mode pageable");
  }
  pipeline::apply_preset(pipeline::preset_of(pipeline::Mode::kPageable), p.pipeline);
}

// On the CPU a GPU recipe still runs (a smoke run of it): what it asks that only CUDA runs gives way to the CPU's
// equivalent, one line each, as the transfer flags give way to mode pageable. Where CUDA is there, the same
// values that cannot run are refused (resolve_fused_bn and the others). Evaluating says it at info level.
void fall_back_on_the_cpu(Plan& p, PlanUse use) {
  if (p.device.is_cuda()) return;
  const bool eval = use == PlanUse::kEval;
  for (const CpuFallback& f : kCpuFallbacks) {
    if (!f.asked(p)) continue;
    if (p.dist_env.rank == 0 && !(eval && f.training_only)) {
      const std::string line = location_of(p, f.key) + ": " + f.key + " = " + value_text(p, f.key) +
                               " needs a CUDA device (device is cpu): " + (eval ? "evaluating " : "training ") +
                               f.running;
      if (eval) log::info(line);
      else log::warn(line);
    }
    f.instead(p);
  }
}

}  // namespace pinfeed::app
