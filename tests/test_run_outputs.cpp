// The run folder's files: metric rows a resumed run has not reached are dropped, metrics.csv follows
// metrics.jsonl, a torn line is cut, stale temp files are removed, bad_images.tsv lists each file once.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/run/run_files.h"
#include "app/run/metrics.h"
#include "app/run/run_outputs.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

namespace fs = std::filesystem;

std::string text_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

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
    RunOutputs out(c, dir);
    for (int64_t e = 1; e <= 3; ++e) out.epoch(row(e));
    out.steps(2, {{0}, {1}, {2}});
  }
  RunOutputs resumed(c, dir, ResumePoint{2, 1});  // epoch 3 (0-based 2) restarts after its first step
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
  { RunOutputs(c, dir).epoch(row(1)); }
  std::ofstream(fs::path(dir) / "metrics.jsonl", std::ios::app) << row(2).dump() << "\n";  // csv write failed
  RunOutputs resumed(c, dir, ResumePoint{2, 0});
  const std::string csv = text_of(fs::path(dir) / "metrics.csv");
  EXPECT_NE(csv.find("\n1,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\n2,"), std::string::npos) << csv;
}

TEST(RunFiles, OpeningAnAppendFileCutsATornLastLine) {
  const std::string file = test::fresh_dir("append_torn") + "/log.jsonl";
  std::ofstream(file) << "{\"a\":1}\n{\"a\":";  // a full disk stopped the second line
  AppendFile(file).append("{\"a\":2}");
  EXPECT_EQ(text_of(file), "{\"a\":1}\n{\"a\":2}\n");
}

TEST(RunFiles, StaleTempFilesAreRemovedAndNothingElse) {
  const std::string dir = test::fresh_dir("stale_tmp");
  std::ofstream(dir + "/last.pt.tmp") << "x";
  std::ofstream(dir + "/last.pt") << "y";
  EXPECT_EQ(remove_stale_temp_files(dir), std::vector<std::string>{"last.pt.tmp"});
  EXPECT_FALSE(fs::exists(dir + "/last.pt.tmp"));
  EXPECT_TRUE(fs::exists(dir + "/last.pt"));
}

TEST(RunOutputs, BadImagesAreListedOnceAcrossAResumeWithTabsAndNewlinesEscaped) {
  const std::string dir = test::fresh_dir("outputs_bad");
  Config c;
  { RunOutputs(c, dir).bad_images({{"/d/a\tb.jpg", "libjpeg: bad\nHuffman"}}); }
  RunOutputs resumed(c, dir, ResumePoint{1, 0});
  resumed.bad_images({{"/d/a\tb.jpg", "libjpeg: bad\nHuffman"}, {"/d/c.jpg", "empty file"}});
  EXPECT_EQ(text_of(fs::path(dir) / "bad_images.tsv"),
            "path\treason\n/d/a\\tb.jpg\tlibjpeg: bad\\nHuffman\n/d/c.jpg\tempty file\n");
}

TEST(RunOutputs, AResumedRunKnowsTheFilesListedBeforeAsWritten) {
  const std::string dir = test::fresh_dir("outputs_bad_listed");
  Config c;
  const std::string hostile = "/d/a\\b\tc\nd\re.jpg";  // every byte tsv_escape rewrites
  { RunOutputs(c, dir).bad_images({{hostile, "empty file"}, {"/d/plain.jpg", "empty file"}}); }
  const RunOutputs resumed(c, dir, ResumePoint{1, 0});
  EXPECT_EQ(resumed.bad_images_listed(), (std::unordered_set<std::string>{hostile, "/d/plain.jpg"}));
  EXPECT_EQ(tsv_unescape(tsv_escape(hostile)), hostile);
}

}  // namespace
}  // namespace pinfeed::app
