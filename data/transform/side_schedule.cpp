#include "data/transform/side_schedule.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>

#include "data/dataset/image_folder.h"  // printable

namespace pinfeed::data {

int64_t SideSchedule::settled_from() const {
  if (!by_epoch.empty()) return static_cast<int64_t>(by_epoch.size()) - 1;
  if (!ramp()) return 0;
  // FFCV tests epoch <= start_ramp first: with start_ramp == end_ramp, min holds through that epoch, max follows.
  return std::max<int64_t>(end_ramp, int64_t{start_ramp} + 1);
}

int SideSchedule::at(int64_t epoch, int fixed) const {
  if (!by_epoch.empty()) return by_epoch[static_cast<size_t>(std::min(epoch, settled_from()))];
  if (!ramp()) return fixed;
  if (epoch <= start_ramp) return min;
  if (epoch >= settled_from()) return max;
  const double t = static_cast<double>(epoch - start_ramp) / (end_ramp - start_ramp);
  // np.round: halves to even, as std::nearbyint in the default rounding mode.
  return static_cast<int>(std::nearbyint((min + t * (max - min)) / step)) * step;
}

std::vector<int> SideSchedule::sides(int64_t epochs, int fixed) const {
  std::set<int> all;
  for (int64_t e = 0; e < std::max<int64_t>(epochs, 1); ++e) all.insert(at(e, fixed));
  return {all.begin(), all.end()};
}

std::vector<int> SideSchedule::all_sides(int fixed) const { return sides(settled_from() + 1, fixed); }

std::string SideSchedule::problem() const {
  if (!by_epoch.empty() && (min > 0 || max > 0)) return "set either the ramp (min, max) or the list, not both";
  if ((min > 0) != (max > 0)) return "the ramp needs both its smallest and its largest side";
  if (ramp() && min > max) return "the ramp's smallest side " + std::to_string(min) + " is over its largest " + std::to_string(max);
  if (ramp() && start_ramp > end_ramp) {
    return "the ramp starts at epoch " + std::to_string(start_ramp) + ", after its end " + std::to_string(end_ramp);
  }
  return "";
}

std::vector<int> parse_sides(const std::string& text, int lo, int hi, int64_t max_epochs) {
  const std::string form = "must be sides with optional epoch counts, e.g. \"160*12, 192*4\"";
  std::vector<int> out;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    int side = 0;
    long long count = 1;
    char star = 0, extra = 0;
    std::istringstream in(item);
    const bool malformed = !(in >> side) || (in >> star && (star != '*' || !(in >> count) || in >> extra));
    if (malformed) throw std::invalid_argument(form + ", got \"" + printable(text) + "\"");
    if (side < lo || side > hi) {
      throw std::invalid_argument("must hold sides in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                  "], got " + std::to_string(side));
    }
    if (count < 1 || static_cast<int64_t>(out.size()) + count > max_epochs) {
      throw std::invalid_argument("must give each side 1 to " + std::to_string(max_epochs) + " epochs in all, got " +
                                  std::to_string(count));
    }
    out.insert(out.end(), static_cast<size_t>(count), side);
  }
  return out;
}

std::string sides_text(const std::vector<int>& sides) {
  std::string out;
  for (size_t i = 0; i < sides.size();) {
    size_t j = i;
    while (j < sides.size() && sides[j] == sides[i]) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(sides[i]) + (j - i > 1 ? "*" + std::to_string(j - i) : "");
    i = j;
  }
  return out;
}

}  // namespace pinfeed::data
