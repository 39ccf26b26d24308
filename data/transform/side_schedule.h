// The training crop's side by epoch: one side, FFCV's progressive resizing, or an explicit list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pinfeed::data {

// FFCV's get_resolution: `min` up to epoch `start_ramp`, `max` from `end_ramp`, linear between, rounded to a
// multiple of `step` (epochs counted from 0, as FFCV counts them). Or `by_epoch`: epoch e gets by_epoch[e], the
// last one the epochs after it. Neither set: the fixed side.
struct SideSchedule {
  int min = 0, max = 0;  // 0: no ramp
  int start_ramp = 0, end_ramp = 0;
  int step = 32;
  std::vector<int> by_epoch;

  bool ramp() const { return min > 0 && max > 0; }
  bool active() const { return ramp() || !by_epoch.empty(); }
  // The side of `epoch`; `fixed` when the schedule is off.
  int at(int64_t epoch, int fixed) const;
  // The first epoch from which at() gives the same side for good (0 when the schedule is off).
  int64_t settled_from() const;
  // Every side it gives over `epochs` epochs, ascending, each once; all_sides: over a run of any length.
  std::vector<int> sides(int64_t epochs, int fixed) const;
  std::vector<int> all_sides(int fixed) const;
  // What is wrong with it ("" if nothing): min > max, start_ramp > end_ramp.
  std::string problem() const;
};

// "160*12, 192*4" (a side and how many epochs it holds; "*1" may go unsaid) into 12 x 160 then 4 x 192, and back.
// Sides in [lo, hi], at most max_epochs in all; throws std::invalid_argument("must ...").
std::vector<int> parse_sides(const std::string& text, int lo, int hi, int64_t max_epochs);
std::string sides_text(const std::vector<int>& sides);

}  // namespace pinfeed::data
