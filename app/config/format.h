// Numbers as the run's outputs show them: "n/a" on screen and null in JSON for a figure that does not apply
// (NaN), never a zero.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace pinfeed::app {

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

inline nlohmann::json num_or_null(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

}  // namespace pinfeed::app
