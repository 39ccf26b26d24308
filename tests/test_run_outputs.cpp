// The run folder's files: metric rows a resumed run has not reached are dropped, metrics.csv follows
// metrics.jsonl, a torn line is cut, pinfeed's own stale temp files are removed (a user's stay), bad_images.tsv
// lists each file once, each start is recorded in run.json with its config beside the first, one process holds
// a folder at a time, `--resume last` finds the run by its exact name, steps.jsonl carries each step's loss.
#include <gtest/gtest.h>

#include <ATen/ops/scalar_tensor.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "app/config/config.h"
#include "app/run/metrics.h"
#include "app/run/run_files.h"
#include "app/run/run_lock.h"
#include "app/run/run_outputs.h"
#include "app/run/run_record.h"
#include "engine/step/step_losses.h"
#include "common/log.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

namespace fs = std::filesystem;

std::string text_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// What the trainer writes a run's outputs from: the config as text, run.name and run.log_steps.
RunOutputsOptions options_of(const Config& c) { return {to_toml(c), c.run.name, c.run.log_steps}; }

nlohmann::json row(int64_t epoch) {
  nlohmann::json r;
  for (const Metric& m : kEpochMetrics) r[m.name] = nullptr;
  r["epoch"] = epoch;
  r["mode"] = "pageable";
  return r;
}

TEST(RunOutputs, ResumeDropsRowsOfEpochsTheCheckpointHasNotReached) {
  const std::string dir = test::fresh_dir("outputs_trim");
  Config c;
  c.run.log_steps = true;
  {
    RunOutputs out(options_of(c), dir);
    for (int64_t e = 1; e <= 3; ++e) out.epoch(row(e));
    out.steps(2, {engine::StepRow{{0}}, engine::StepRow{{1}}, engine::StepRow{{2}}});
  }
  RunOutputs resumed(options_of(c), dir, ResumePoint{2, 1});  // epoch 3 (0-based 2) restarts after its first step
  EXPECT_EQ(text_of(fs::path(dir) / "metrics.jsonl"), row(1).dump() + "\n" + row(2).dump() + "\n");
  const std::string csv = text_of(fs::path(dir) / "metrics.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3) << csv;
  EXPECT_EQ(csv.find("\n3,"), std::string::npos) << csv;
  const std::string steps = text_of(fs::path(dir) / "steps.jsonl");
  EXPECT_EQ(std::count(steps.begin(), steps.end(), '\n'), 1) << steps;
}

TEST(RunOutputs, ResumeRebuildsACsvThatLacksARowOfTheJsonl) {
  const std::string dir = test::fresh_dir("outputs_csv");
  Config c;
  { RunOutputs(options_of(c), dir).epoch(row(1)); }
  std::ofstream(fs::path(dir) / "metrics.jsonl", std::ios::app) << row(2).dump() << "\n";  // csv write failed
  RunOutputs resumed(options_of(c), dir, ResumePoint{2, 0});
  const std::string csv = text_of(fs::path(dir) / "metrics.csv");
  EXPECT_NE(csv.find("\n1,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\n2,"), std::string::npos) << csv;
}

// Only what pinfeed writes makes a run folder: file names alone (a user's config.toml and metrics.csv, an empty
// run.json) do not, so a resume never writes into or deletes from such a folder.
TEST(RunFiles, ARunFolderIsKnownByWhatItsFilesHoldNotByTheirNames) {
  const fs::path dir = test::fresh_dir("run_folder_kinds");
  const auto put = [](const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
  };
  put(dir / "foreign/config.toml", "[model]\nname = \"my-other-tool\"\n");
  put(dir / "foreign/metrics.csv", "step,loss\n1,0.5\n");
  EXPECT_FALSE(is_run_folder((dir / "foreign").string()));
  put(dir / "empty_json/run.json", "{}\n");
  EXPECT_FALSE(is_run_folder((dir / "empty_json").string()));
  // An older pinfeed's folder (no run.json), and one whose run.json was damaged: its config and metrics say so.
  const std::string header = std::string(kEpochMetrics[0].name) + "," + kEpochMetrics[1].name + ",train_loss\n";
  Config config;
  config.dataset.root = "data";  // as in any config a run was started with
  for (const char* name : {"older", "damaged"}) {
    put(dir / name / "config.toml", to_toml(config));
    put(dir / name / "metrics.csv", header);
  }
  put(dir / "damaged/run.json", "{\"starts\": [");
  EXPECT_TRUE(is_run_folder((dir / "older").string()));
  EXPECT_TRUE(is_run_folder((dir / "damaged").string()));
  put(dir / "new/run.json", "{\"format\": 1, \"name\": \"x\", \"starts\": []}\n");
  EXPECT_TRUE(is_run_folder((dir / "new").string()));
}

TEST(RunFiles, OpeningAnAppendFileCutsATornLastLine) {
  const std::string file = test::fresh_dir("append_torn") + "/log.jsonl";
  std::ofstream(file) << "{\"a\":1}\n{\"a\":";  // a full disk stopped the second line
  engine::AppendFile(file).append("{\"a\":2}");
  EXPECT_EQ(text_of(file), "{\"a\":1}\n{\"a\":2}\n");
}

TEST(RunFiles, OnlyTheTempFilesOfPinfeedsOwnWritesAreRemoved) {
  const std::string dir = test::fresh_dir("stale_tmp");
  for (const char* name : {"last.pt.tmp", "metrics.csv.tmp", "config.resume-12.toml.tmp", "run.json.tmp",
                           "download.tmp", "config.resume-x.toml.tmp", "last.pt", ".tmp"}) {
    std::ofstream(dir + "/" + name) << "x";
  }
  std::vector<std::string> removed = engine::remove_stale_temp_files(dir);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{"config.resume-12.toml.tmp", "last.pt.tmp", "metrics.csv.tmp",
                                               "run.json.tmp"}));
  for (const char* kept : {"download.tmp", "config.resume-x.toml.tmp", "last.pt", ".tmp"}) {
    EXPECT_TRUE(fs::exists(dir + "/" + kept)) << kept;
  }
}

// A folder as a run of `name` leaves it: run.json naming the run, and (with a checkpoint) last.pt.
void make_run(const fs::path& dir, const std::string& name, bool checkpoint = true) {
  fs::create_directories(dir);
  std::ofstream(dir / "run.json") << nlohmann::json{{"format", 1}, {"name", name}, {"starts", nlohmann::json::array()}};
  if (checkpoint) std::ofstream(dir / "last.pt") << "x";
}

TEST(RunFiles, ResumeLastFindsTheRunWithExactlyThatName) {
  const fs::path runs = test::fresh_dir("find_last_exact");
  make_run(runs / "20260101-120000-quick", "quick");
  make_run(runs / "20260102-120000-other-quick", "other-quick");  // newer, and its folder name ends in -quick
  make_run(runs / "20260103-120000-quick", "quick", /*checkpoint=*/false);  // nothing to resume
  EXPECT_EQ(find_last_run(runs.string(), "quick"), (runs / "20260101-120000-quick").string());
  EXPECT_EQ(find_last_run(runs.string(), "other-quick"), (runs / "20260102-120000-other-quick").string());
  EXPECT_EQ(find_last_run(runs.string(), "other"), "");
}

TEST(RunFiles, ResumeLastOrdersFoldersOfOneSecondByTheirNumber) {
  const fs::path runs = test::fresh_dir("find_last_suffix");
  make_run(runs / "20260101-120000-q", "q");
  make_run(runs / "20260101-120000-q-9", "q");
  make_run(runs / "20260101-120000-q-10", "q");
  EXPECT_EQ(find_last_run(runs.string(), "q"), (runs / "20260101-120000-q-10").string());
}

TEST(RunFiles, AnOlderPinfeedsFolderIsNamedByItsConfigToml) {
  const fs::path runs = test::fresh_dir("find_last_legacy");
  fs::create_directories(runs / "20260101-120000-x-quick");
  std::ofstream(runs / "20260101-120000-x-quick" / "config.toml") << "[run]\nname = \"x-quick\"\n";
  std::ofstream(runs / "20260101-120000-x-quick" / "last.pt") << "x";
  EXPECT_EQ(run_name_of((runs / "20260101-120000-x-quick").string()), "x-quick");
  EXPECT_EQ(find_last_run(runs.string(), "quick"), "");
  EXPECT_EQ(find_last_run(runs.string(), "x-quick"), (runs / "20260101-120000-x-quick").string());
}

TEST(RunLock, ASecondWriterOfTheFolderIsRefusedNamingItAndTheHoldersPid) {
  const std::string dir = test::fresh_dir("run_lock");
  std::optional<RunLock> first(std::in_place, dir);
  const std::string error = test::message_of<ConfigError>([&] { RunLock second(dir); });
  EXPECT_NE(error.find("run folder " + dir + " is in use"), std::string::npos) << error;
  EXPECT_NE(error.find("(pid " + std::to_string(::getpid()) + ")"), std::string::npos) << error;
  EXPECT_FALSE(RunLock::try_take(dir));
  first.reset();  // as the holder's end, however it ends: the kernel releases a flock with the descriptor
  EXPECT_TRUE(RunLock::try_take(dir));
}

TEST(RunLock, AbandonedTempFilesAreRemovedOnlyWhereNoProcessWrites) {
  const fs::path runs = test::fresh_dir("run_lock_orphans");
  for (const char* run : {"a", "b"}) {
    make_run(runs / run, run, /*checkpoint=*/false);
    { RunLock taken((runs / run).string()); }  // a run that ran: it left its lock file
    std::ofstream(runs / run / "last.pt.tmp") << "half a first checkpoint";
    std::ofstream(runs / run / "notes.tmp") << "the user's";
  }
  const RunLock busy((runs / "b").string());  // b's writer is alive: its temp file is a write in progress
  EXPECT_EQ(remove_abandoned_temp_files(runs.string()), std::vector<std::string>{(runs / "a" / "last.pt.tmp").string()});
  EXPECT_FALSE(fs::exists(runs / "a" / "last.pt.tmp"));
  EXPECT_TRUE(fs::exists(runs / "a" / "notes.tmp"));
  EXPECT_TRUE(fs::exists(runs / "b" / "last.pt.tmp"));
}

TEST(RunOutputs, EachStartIsRecordedAndEachResumesConfigKeptBesideTheFirst) {
  const std::string dir = test::fresh_dir("outputs_record");
  Config first, later;
  first.run.name = later.run.name = "rec";
  later.schedule.epochs = 7;
  { RunOutputs(options_of(first), dir); }
  RunStart facts;
  facts.checkpoint = dir + "/last.pt";
  facts.resume_epoch = 2;
  { RunOutputs(options_of(later), dir, ResumePoint{1, 0}, facts); }
  { RunOutputs(options_of(later), dir, ResumePoint{1, 0}, facts); }
  EXPECT_EQ(text_of(fs::path(dir) / "config.toml"), to_toml(first));
  EXPECT_EQ(text_of(fs::path(dir) / "config.resume-1.toml"), to_toml(later));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "config.resume-2.toml"));
  const nlohmann::json run = nlohmann::json::parse(text_of(fs::path(dir) / "run.json"));
  EXPECT_EQ(run.at("name"), "rec");
  ASSERT_EQ(run.at("starts").size(), 3u);
  const nlohmann::json& start = run["starts"][0];
  for (const char* key : {"time", "command", "host", "pinfeed_version", "git_commit", "libtorch", "cuda", "cudnn",
                          "gpu", "driver", "device", "world_size"}) {
    EXPECT_TRUE(start.contains(key)) << key;
  }
  EXPECT_EQ(start.at("config"), "config.toml");
  EXPECT_TRUE(start.at("resumed_from").is_null());
  EXPECT_EQ(run["starts"][1].at("config"), "config.resume-1.toml");
  EXPECT_EQ(run["starts"][1].at("resumed_from").at("epoch"), 2);
  EXPECT_FALSE(start.at("command").empty());
  EXPECT_TRUE(is_run_folder(dir));
}

TEST(RunOutputs, StepRowsNumberEpochsFromOneAndCarryLossAndLr) {
  const std::string dir = test::fresh_dir("outputs_steps");
  Config c;
  c.run.log_steps = true;
  {
    RunOutputs out(options_of(c), dir);
    out.steps(0, {engine::StepRow{{0}, 2.5, 0.1}, engine::StepRow{{1}, NAN, 0.1}});
  }
  std::istringstream lines(text_of(fs::path(dir) / "steps.jsonl"));
  std::string line;
  std::getline(lines, line);
  const nlohmann::json first = nlohmann::json::parse(line);
  EXPECT_EQ(first.at("epoch"), 1);
  EXPECT_EQ(first.at("step"), 0);
  EXPECT_EQ(first.at("loss"), 2.5);
  EXPECT_EQ(first.at("lr"), 0.1);
  std::set<std::string> named, written;
  for (const Metric& m : kStepMetrics) named.insert(m.name);
  for (const auto& item : first.items()) written.insert(item.key());
  EXPECT_EQ(written, named);
  std::getline(lines, line);
  EXPECT_TRUE(nlohmann::json::parse(line).at("loss").is_null()) << "a loss that is not a number is null";
}

TEST(RunOutputs, AnOlderPinfeedsStepRowsAreRenumberedFromOneOnResume) {
  const std::string dir = test::fresh_dir("outputs_steps_legacy");
  std::ofstream(fs::path(dir) / "config.toml") << "";
  std::ofstream(fs::path(dir) / "steps.jsonl") << "{\"epoch\":0,\"step\":0}\n{\"epoch\":1,\"step\":0}\n"
                                                  "{\"epoch\":1,\"step\":1}\n";
  Config c;
  c.run.log_steps = true;
  RunOutputs resumed(options_of(c), dir, ResumePoint{1, 1});  // epoch 2 (0-based 1) continues after its first step
  EXPECT_EQ(text_of(fs::path(dir) / "steps.jsonl"), "{\"epoch\":1,\"step\":0}\n{\"epoch\":2,\"step\":0}\n");
}

TEST(RunRecord, TheDriverVersionIsTheNumberInTheKernelModulesLine) {
  EXPECT_EQ(nvidia_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
                                  "(dvs-builder@U22)  Thu Jul 17 2025\nGCC version:  gcc version 12.2.0\n"),
            "580.159.04");
  EXPECT_EQ(nvidia_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 2023\n"),
            "535.104.05");
  EXPECT_EQ(nvidia_driver_version(""), "");
  EXPECT_EQ(nvidia_driver_version("GCC version: 12\n"), "");
}

TEST(StepLosses, EachRecordGetsItsStepsLossAndLr) {
  engine::StepLosses losses(c10::Device(c10::kCPU), std::nullopt);
  losses.start_epoch(4, 1);  // a resumed epoch: steps 1..3
  losses.add(1, at::scalar_tensor(1.5), 0.1);
  losses.add(2, at::scalar_tensor(2.5), 0.2);
  pipeline::StepRecord r1, r2;
  r1.step = 1;
  r2.step = 2;
  const std::vector<engine::StepRow> rows = losses.join({r1, r2}, /*wait=*/true);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].loss, 1.5);
  EXPECT_EQ(rows[1].lr, 0.2);
}

TEST(Log, TeeKeepsEveryPrintedLineInTheFile) {
  const std::string file = test::fresh_dir("log_tee") + "/run.log";
  ASSERT_TRUE(log::tee(file));
  log::info("first line");
  log::warn("second line");
  log::status("a progress line redrawn", /*redraw=*/true);
  log::error("third line");
  log::tee("");
  log::info("after the tee");
  const std::string text = text_of(file);
  EXPECT_NE(text.find("first line\n"), std::string::npos) << text;
  EXPECT_NE(text.find("warning: second line\n"), std::string::npos) << text;
  EXPECT_NE(text.find("error: third line\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("redrawn"), std::string::npos) << text;
  EXPECT_EQ(text.find("after the tee"), std::string::npos) << text;
}

// A path typed on the command line, quoted in a message, cannot drive the terminal: its escape sequence is shown.
TEST(Log, ControlCharactersInAMessageAreShownEscaped) {
  const std::string file = test::fresh_dir("log_escape") + "/run.log";
  ASSERT_TRUE(log::tee(file));
  log::error("/tmp/r\x1b[31m/last.pt: no such file\nsecond line");
  log::tee("");
  const std::string text = text_of(file);
  EXPECT_NE(text.find("error: /tmp/r\\x1b[31m/last.pt: no such file\nsecond line\n"), std::string::npos) << text;
  EXPECT_EQ(log::printable("a\tb\n"), "a\\x09b\\x0a");
}

TEST(RunOutputs, BadImagesAreListedOnceAcrossAResumeWithTabsAndNewlinesEscaped) {
  const std::string dir = test::fresh_dir("outputs_bad");
  Config c;
  { RunOutputs(options_of(c), dir).bad_images({{"/d/a\tb.jpg", "libjpeg: bad\nHuffman"}}); }
  RunOutputs resumed(options_of(c), dir, ResumePoint{1, 0});
  resumed.bad_images({{"/d/a\tb.jpg", "libjpeg: bad\nHuffman"}, {"/d/c.jpg", "empty file"}});
  EXPECT_EQ(text_of(fs::path(dir) / "bad_images.tsv"),
            "path\treason\n/d/a\\tb.jpg\tlibjpeg: bad\\nHuffman\n/d/c.jpg\tempty file\n");
}

TEST(RunOutputs, AResumedRunKnowsTheFilesListedBeforeAsWritten) {
  const std::string dir = test::fresh_dir("outputs_bad_listed");
  Config c;
  const std::string hostile = "/d/a\\b\tc\nd\re.jpg";  // every byte tsv_escape rewrites
  { RunOutputs(options_of(c), dir).bad_images({{hostile, "empty file"}, {"/d/plain.jpg", "empty file"}}); }
  const RunOutputs resumed(options_of(c), dir, ResumePoint{1, 0});
  EXPECT_EQ(resumed.bad_images_listed(), (std::unordered_set<std::string>{hostile, "/d/plain.jpg"}));
  EXPECT_EQ(tsv_unescape(tsv_escape(hostile)), hostile);
}

}  // namespace
}  // namespace pinfeed::app
