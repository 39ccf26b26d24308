// Numbers as the run's outputs show them: "n/a" on screen and null in JSON for a figure that does not apply
// (NaN), never a zero.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace pinfeed::common {

inline std::string fmt_ms(double v) {  // 3-4 significant digits
  if (std::isnan(v)) return "n/a";
  std::ostringstream s;
  s.precision(v < 1 ? 3 : 4);
  s << v;
  return s.str();
}

inline std::string fixed(double v, int digits) {
  if (std::isnan(v)) return "n/a";
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

// A fraction as a percentage, "12.3%"; "n/a" without the sign when it does not apply (NaN, or a ratio to 0).
inline std::string percent(double fraction, int digits) {
  return std::isfinite(fraction) ? fixed(100 * fraction, digits) + "%" : "n/a";
}

// A ratio, "1.02x"; "n/a" when either side is missing (NaN) or the base is 0.
inline std::string times(double ratio, int digits) {
  return std::isfinite(ratio) ? fixed(ratio, digits) + "x" : "n/a";
}

// "1 worker", "2 workers" (nouns whose plural adds an s).
inline std::string count_of(long long n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

inline nlohmann::json num_or_null(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

}  // namespace pinfeed::common
