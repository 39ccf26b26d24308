#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset/dataset.h"
#include "data/transform/side_schedule.h"
#include "data/transform/transforms.h"

namespace pinfeed::data {
namespace {

std::vector<int> by_epoch(const SideSchedule& s, int epochs, int fixed = 224) {
  std::vector<int> out;
  for (int e = 0; e < epochs; ++e) out.push_back(s.at(e, fixed));
  return out;
}

// FFCV's rn50_16_epochs.yaml: min_res 160, max_res 192, start_ramp 11, end_ramp 13; its get_resolution gives
// 160 to epoch 11, np.round(176 / 32) = 6 (halves to even) x 32 = 192 at epoch 12, 192 after.
TEST(SideSchedule, RampFollowsFfcvGetResolution) {
  SideSchedule s;
  s.min = 160, s.max = 192, s.start_ramp = 11, s.end_ramp = 13;
  std::vector<int> want(12, 160);
  want.insert(want.end(), 4, 192);
  EXPECT_EQ(by_epoch(s, 16), want);
  EXPECT_EQ(s.sides(16, 224), (std::vector<int>{160, 192}));
  EXPECT_EQ(s.sides(5, 224), (std::vector<int>{160}));  // a run ending before the ramp
  // A longer ramp passes the multiples of 32 between (FFCV's 88 epochs: 65 -> 76).
  s.start_ramp = 65, s.end_ramp = 76;
  EXPECT_EQ(s.at(70, 224), 160 + 32 * 0);  // 160 + 5/11 x 32 = 174.5 -> 5.45 -> 5 x 32
  EXPECT_EQ(s.at(72, 224), 192);           // 180.4 -> 5.64 -> 6 x 32
  s.min = 128, s.max = 256, s.start_ramp = 0, s.end_ramp = 4;
  EXPECT_EQ(by_epoch(s, 6), (std::vector<int>{128, 160, 192, 224, 256, 256}));
  EXPECT_EQ(s.all_sides(224), (std::vector<int>{128, 160, 192, 224, 256}));
}

// Every side at() gives, at any epoch, is one all_sides() lists: the dataset builds a transform for each listed side
// (an epoch at another would find every image "bad") and memory is sized for the largest.
TEST(SideSchedule, EverySideOfEveryEpochIsAmongAllSides) {
  std::vector<SideSchedule> schedules;
  for (const auto& [start, end] : std::vector<std::pair<int, int>>{
           {0, 0}, {1, 1}, {5, 5}, {0, 1}, {0, 4}, {2, 3}, {11, 13}, {3, 10}, {65, 76}}) {
    for (const int step : {16, 32}) {
      SideSchedule s;
      s.min = 32, s.max = 64, s.step = step, s.start_ramp = start, s.end_ramp = end;
      schedules.push_back(s);
    }
  }
  for (const std::vector<int>& list : {std::vector<int>{160, 160, 192}, {192, 160}, {128}}) {
    SideSchedule s;
    s.by_epoch = list;
    schedules.push_back(s);
  }
  schedules.emplace_back();  // off
  for (const SideSchedule& s : schedules) {
    const std::string what = "ramp " + std::to_string(s.start_ramp) + "-" + std::to_string(s.end_ramp) + " step " +
                             std::to_string(s.step) + ", list " + sides_text(s.by_epoch);
    const std::vector<int> all = s.all_sides(224);
    for (int e = 0; e <= s.settled_from() + 5; ++e) {
      EXPECT_NE(std::find(all.begin(), all.end(), s.at(e, 224)), all.end()) << what << ": epoch " << e;
      if (e >= s.settled_from()) {
        EXPECT_EQ(s.at(e, 224), s.at(s.settled_from(), 224)) << what << ": epoch " << e;
      }
    }
    if (s.ramp()) {
      EXPECT_EQ(all.back(), s.max) << what;
    }
  }
}

// FFCV's get_resolution tests epoch <= start_ramp first: a ramp that starts and ends at one epoch holds min
// through it and jumps to max at the next, and the dataset has a transform for both.
TEST(SideSchedule, ARampStartingAndEndingAtOneEpochJumpsAtTheNext) {
  TransformOptions t;
  t.size = 48;
  t.schedule.min = 32, t.schedule.max = 64;
  EXPECT_EQ(by_epoch(t.schedule, 3), (std::vector<int>{32, 64, 64}));  // ramp_start = ramp_end = 0: the defaults
  EXPECT_EQ(t.schedule.all_sides(48), (std::vector<int>{32, 64}));
  EXPECT_EQ(largest_side(t, true), 64);
  const Dataset at_zero(ImageFolder{}, t, true, BadImagePolicy::kSkip);
  EXPECT_EQ(at_zero.transform_at(1).size, 64);
  t.schedule.start_ramp = t.schedule.end_ramp = 1;
  EXPECT_EQ(by_epoch(t.schedule, 4), (std::vector<int>{32, 32, 64, 64}));
  const Dataset at_one(ImageFolder{}, t, true, BadImagePolicy::kSkip);
  EXPECT_EQ(at_one.transform_at(2).size, 64);
}

TEST(SideSchedule, OffGivesTheFixedSide) {
  const SideSchedule s;
  EXPECT_FALSE(s.active());
  EXPECT_EQ(by_epoch(s, 3, 176), (std::vector<int>{176, 176, 176}));
}

TEST(SideSchedule, ListHoldsItsLastSideForLaterEpochs) {
  SideSchedule s;
  s.by_epoch = parse_sides("160*2, 192", 16, 4096, 1000);
  EXPECT_EQ(s.by_epoch, (std::vector<int>{160, 160, 192}));
  EXPECT_EQ(by_epoch(s, 5), (std::vector<int>{160, 160, 192, 192, 192}));
  EXPECT_EQ(sides_text(s.by_epoch), "160*2, 192");
  EXPECT_EQ(parse_sides(sides_text(parse_sides("128*3,160*12 , 192*4", 16, 4096, 1000)), 16, 4096, 1000).size(), 19u);
  EXPECT_TRUE(parse_sides("", 16, 4096, 1000).empty());
  EXPECT_THROW(parse_sides("160*600, 192*401", 16, 4096, 1000), std::invalid_argument);  // over the epochs' bound
  for (const char* bad : {"160x2", "abc", "160*0", "8", "160*", "160*2*3", "160, ,192"}) {
    EXPECT_THROW(parse_sides(bad, 16, 4096, 1000), std::invalid_argument) << bad;
  }
  try {  // a hostile value is shown escaped, never as the terminal would act on it
    parse_sides("160\x1b[2J", 16, 4096, 1000);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).find('\x1b'), std::string::npos) << e.what();
  }
}

TEST(SideSchedule, ProblemsAreNamed) {
  SideSchedule s;
  s.min = 192, s.max = 160;
  EXPECT_NE(s.problem().find("over its largest"), std::string::npos);
  s.min = 160, s.max = 0;
  EXPECT_NE(s.problem().find("both"), std::string::npos);
  s.max = 192, s.start_ramp = 5, s.end_ramp = 4;
  EXPECT_NE(s.problem().find("after its end"), std::string::npos);
  s.end_ramp = 5;
  EXPECT_EQ(s.problem(), "");
  s.by_epoch = {160};
  EXPECT_NE(s.problem().find("not both"), std::string::npos);
}

TEST(SideSchedule, ValidationKeepsItsOwnSideAndMemoryIsSizedForTheLargest) {
  TransformOptions t;
  t.size = 224;
  t.schedule.min = 160, t.schedule.max = 192, t.schedule.start_ramp = 1, t.schedule.end_ramp = 2;
  EXPECT_EQ(side_of(t, true, 0), 160);
  EXPECT_EQ(side_of(t, true, 2), 192);
  EXPECT_EQ(side_of(t, false, 0), 224);  // data.val_image_size 0: data.image_size
  t.val_size = 256;
  EXPECT_EQ(side_of(t, false, 5), 256);
  EXPECT_EQ(largest_side(t, true), 192);
  EXPECT_EQ(largest_side(t, false), 256);
  const TransformOptions at = at_side(t, 176);
  EXPECT_EQ(at.size, 176);
  EXPECT_FALSE(at.schedule.active());
  EXPECT_EQ(side_of(at, false, 0), 176);
}

}  // namespace
}  // namespace pinfeed::data
