// Traces of chosen steps (run.trace_steps, bench --trace-steps) on the CPU: Kineto records the training thread's
// ranges there too, so the file's steps can be counted. The GPU side (kernels, copies) is test_gpu_trace.cpp's.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>

#include "app/bench/bench.h"
#include "app/train/trainer.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// 3 steps an epoch (48 images, batch 16).
Config tiny_config(const std::string& root, const std::string& runs, int epochs, const std::string& trace_steps) {
  return parse_config_string("[data]\nimage_size = 32\nworkers = 2\n[train]\ndevice = \"cpu\"\nbatch_size = 16\n"
                             "precision = \"fp32\"\neval = false\n[model]\narch = \"resnet18\"\n[pipeline]\nwarmup_steps = 1\n[run]\nname = \"t\"\n",
                             "tiny.toml",
                             {"data.root=\"" + root + "\"", "run.dir=\"" + runs + "\"", "train.epochs=" + std::to_string(epochs),
                              "run.trace_steps=\"" + trace_steps + "\""});
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// How many ranges of each pinfeed:: name the training thread left in the trace.
std::map<std::string, int> ranges_in(const json& trace) {
  std::map<std::string, int> n;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.value("cat", "") == "user_annotation" && e.value("ph", "") == "X") ++n[e.value("name", "")];
  }
  return n;
}

TEST(StepTrace, TrainWritesAChromeTraceOfExactlyTheStepsAsked) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("trace_train", 2, 24, 1, 32);
  const TrainResult r = train(resolve_plan(tiny_config(root, test::fresh_dir("trace_train_runs"), 2, "4-5")), {}, stop);
  ASSERT_EQ(r.epochs.size(), 2u);
  const fs::path file = fs::path(r.run_dir) / "trace_steps_4-5.json";
  ASSERT_TRUE(fs::exists(file));
  const json trace = read_json(file);  // valid JSON, as Perfetto and chrome://tracing read it
  const auto n = ranges_in(trace);
  EXPECT_EQ(n.count("pinfeed::step") ? n.at("pinfeed::step") : 0, 2);  // global steps 4 and 5: epoch 2's 2nd and 3rd
  EXPECT_EQ(n.count("pinfeed::wait") ? n.at("pinfeed::wait") : 0, 2);
  EXPECT_EQ(n.count("pinfeed::ahead") ? n.at("pinfeed::ahead") : 0, 2);
  EXPECT_EQ(n.size(), 3u) << "no ATen operators: only the user scopes are recorded";
  const json& meta = trace.at("pinfeed");
  EXPECT_EQ(meta.at("steps"), json({4, 5}));
  EXPECT_EQ(meta.at("steps_traced"), json({4, 5}));
  EXPECT_EQ(meta.at("command"), "train");
  EXPECT_EQ(meta.at("stepmeter").at("steps"), 2);
  EXPECT_EQ(meta.at("stepmeter").at("samples"), 32);
  EXPECT_TRUE(meta.at("stepmeter").at("gpu_idle").is_null()) << "no GPU: null, not 0";
  EXPECT_GT(meta.at("stepmeter").at("compute_ms_mean").get<double>(), 0);
}

TEST(StepTrace, TrainWithoutTraceStepsWritesNoTrace) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("trace_none", 2, 16, 1, 32);
  const TrainResult r = train(resolve_plan(tiny_config(root, test::fresh_dir("trace_none_runs"), 1, "")), {}, stop);
  for (const auto& entry : fs::directory_iterator(r.run_dir)) {
    EXPECT_EQ(entry.path().filename().string().rfind("trace", 0), std::string::npos) << entry.path();
  }
}

TEST(StepTrace, TrainRefusesARangeAcrossAnEpochEndOrPastTheRun) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("trace_refuse", 2, 24, 1, 32);
  const std::string runs = test::fresh_dir("trace_refuse_runs");
  auto error = [&](const std::string& steps) {
    return test::message_of<ConfigError>([&] { train(resolve_plan(tiny_config(root, runs, 2, steps)), {}, stop); });
  };
  const std::string across = error("2-3");
  EXPECT_NE(across.find("run.trace_steps = \"2-3\" crosses the end of epoch 1 (its steps are 0-2)"), std::string::npos)
      << across;
  const std::string past = error("5-6");
  EXPECT_NE(past.find("run.trace_steps = \"5-6\" goes past this run's last step, 5 (2 epochs of 3 steps"), std::string::npos)
      << past;
  EXPECT_NE(past.rfind("override 'run.trace_steps=\"5-6\"':1:", 0), std::string::npos) << "where it was set: " << past;
}

TEST(StepTrace, BenchWritesATraceOfTheTimedStepsOfEachRow) {
  engine::StopRequest stop;
  const std::string root = test::make_dataset("trace_bench", 2, 16, 0, 32);
  const std::string dir = test::fresh_dir("trace_bench_out");
  const std::string config = dir + "/bench.toml";
  std::ofstream(config) << "[data]\nroot = \"" << root << "\"\nimage_size = 32\nworkers = 2\n[train]\ndevice = \"cpu\"\n"
                        << "batch_size = 8\nprecision = \"fp32\"\n";
  BenchArgs a;
  a.start.config = config;
  a.modes = {"pageable", "loader_only"};
  a.repeats = 2;  // the first repeat alone is traced
  a.warmup = 2;
  a.steps = 4;
  a.trace_steps = "1-2";
  a.out = dir + "/out";
  ASSERT_EQ(run_bench(a, stop), 0);
  for (const char* row : {"pageable", "loader_only"}) {
    const fs::path file = fs::path(a.out) / ("trace." + std::string(row) + ".json");
    ASSERT_TRUE(fs::exists(file)) << file;
    const json trace = read_json(file);
    const auto n = ranges_in(trace);
    EXPECT_EQ(n.count("pinfeed::step") ? n.at("pinfeed::step") : 0, 2) << row;
    EXPECT_EQ(trace.at("pinfeed").at("row"), row);
    EXPECT_EQ(trace.at("pinfeed").at("steps_traced"), json({1, 2})) << "numbered from the first timed step";
  }
}

TEST(StepTrace, BenchRefusesARangePastItsTimedSteps) {
  engine::StopRequest stop;
  BenchArgs a;
  a.start.config = "/unused.toml";  // refused before the config is read
  a.steps = 100;
  a.trace_steps = "90-100";
  const std::string e = test::message_of<ConfigError>([&] { run_bench(a, stop); });
  EXPECT_NE(e.find("--trace-steps 90-100 goes past the last timed step, 99 (--steps 100"), std::string::npos) << e;
  a.trace_steps = "x";
  EXPECT_NE(test::message_of<ConfigError>([&] { run_bench(a, stop); }).find("--trace-steps must be \"A-B\""), std::string::npos);
}

}  // namespace
}  // namespace pinfeed::app
