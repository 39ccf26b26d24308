// A trace on the GPU (ctest label "gpu"; skipped without CUDA): CUPTI's kernels and copies are in it, on the
// streams they ran on, beside the training thread's ranges. No timing is asserted (scripts/bench_feed.sh
// --trace-check compares the idle figures).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "app/train/trainer.h"
#include "gpu/gpu.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

TEST(GpuTrace, DualStreamTraceHoldsTheKernelsOnTheComputeStreamAndTheCopiesOnTheirOwn) {
  engine::StopRequest stop;
  if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  const std::string root = test::make_dataset("gpu_trace", 2, 32, 1, 40);  // 4 steps an epoch
  const Config c = parse_config_string(
      "[data]\nimage_size = 32\nworkers = 2\n[train]\ndevice = \"cuda\"\nbatch_size = 16\neval = false\n"
      "[pipeline]\nmode = \"dual_stream\"\nwarmup_steps = 1\n[run]\nname = \"t\"\n",
      "gpu_trace.toml", {"data.root=\"" + root + "\"", "run.dir=\"" + test::fresh_dir("gpu_trace_runs") + "\"",
                         "train.epochs=2", "run.trace_steps=\"5-7\""});
  const TrainResult r = train(resolve_plan(c), {}, stop);
  const fs::path file = fs::path(r.run_dir) / "trace_steps_5-7.json";
  ASSERT_TRUE(fs::exists(file));
  std::ifstream in(file);
  const json trace = json::parse(in);

  int steps = 0;
  std::map<int64_t, int> kernels_per_stream;
  std::set<int64_t> h2d_streams;
  int launches = 0;
  for (const auto& e : trace.at("traceEvents")) {
    const std::string cat = e.value("cat", "");
    if (cat == "user_annotation" && e.value("name", "") == "pinfeed::step") ++steps;
    if (cat == "kernel") ++kernels_per_stream[e.at("args").at("stream").get<int64_t>()];
    if (cat == "gpu_memcpy" && e.value("name", "").find("HtoD") != std::string::npos) {
      h2d_streams.insert(e.at("args").at("stream").get<int64_t>());
    }
    if (cat == "cuda_runtime" || cat == "cuda_driver") ++launches;
  }
  EXPECT_EQ(steps, 3);
  ASSERT_FALSE(kernels_per_stream.empty()) << "CUPTI recorded no kernel";
  EXPECT_GT(launches, 0) << "no launch events to tie kernels to steps";
  int64_t compute = kernels_per_stream.begin()->first;
  for (const auto& [stream, n] : kernels_per_stream) {
    if (n > kernels_per_stream[compute]) compute = stream;
  }
  ASSERT_FALSE(h2d_streams.empty()) << "no host-to-device copy recorded";
  EXPECT_EQ(h2d_streams.count(compute), 0u) << "dual_stream copies on the copy stream, not the compute stream";
  const json& sm = trace.at("pinfeed").at("stepmeter");
  EXPECT_EQ(sm.at("steps"), 3);
  EXPECT_TRUE(sm.at("gpu_idle").is_number());
}

}  // namespace
}  // namespace pinfeed::app
