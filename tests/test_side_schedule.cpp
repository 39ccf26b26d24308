#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

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
