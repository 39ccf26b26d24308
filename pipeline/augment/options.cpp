#include "pipeline/augment/options.h"

#include <cmath>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "data/dataset/image_folder.h"  // printable

namespace pinfeed::pipeline::augment {

PolicyOptions parse_policy(const std::string& text) {
  PolicyOptions p;
  if (text.empty()) return p;
  if (text == "trivial") {
    p.policy = Policy::kTrivialAugmentWide;
    return p;
  }
  if (text == "imagenet") {
    p.policy = Policy::kAutoAugmentImageNet;
    return p;
  }
  // timm's RandAugment string, its two arguments in either order: rand-m9-n2.
  static const std::regex re("rand-(m([0-9]{1,2})-n([0-9]{1,2})|n([0-9]{1,2})-m([0-9]{1,2}))");
  std::smatch m;
  const std::string expected = "must be \"\" (off), \"trivial\" (TrivialAugmentWide), \"rand-mM-nN\" (RandAugment: N ops "
                               "at magnitude M of 31 bins, 0 <= M <= 30, 1 <= N <= " + std::to_string(kMaxRandOps) +
                               ") or \"imagenet\" (AutoAugment's ImageNet policy), got \"" + data::printable(text) + "\"";
  if (!std::regex_match(text, m, re)) throw std::invalid_argument(expected);
  const bool m_first = m[2].matched;
  p.policy = Policy::kRandAugment;
  p.rand_magnitude = std::stoi(m_first ? m[2].str() : m[5].str());
  p.rand_ops = std::stoi(m_first ? m[3].str() : m[4].str());
  if (p.rand_magnitude >= kRandAugmentBins || p.rand_ops < 1 || p.rand_ops > kMaxRandOps) throw std::invalid_argument(expected);
  return p;
}

std::string policy_text(const PolicyOptions& p) {
  switch (p.policy) {
    case Policy::kNone: return "";
    case Policy::kTrivialAugmentWide: return "trivial";
    case Policy::kAutoAugmentImageNet: return "imagenet";
    case Policy::kRandAugment:
      return "rand-m" + std::to_string(p.rand_magnitude) + "-n" + std::to_string(p.rand_ops);
  }
  return "";
}

Fill parse_fill(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const std::string expected = "must be \"\" (zeros, torchvision's fill=None), one value or \"R,G,B\", each in [0, 255], "
                               "got \"" + data::printable(text) + "\"";
  static const std::regex number("\\s*([0-9]+(\\.[0-9]*)?)\\s*");
  std::vector<float> values;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    std::smatch m;
    if (!std::regex_match(part, m, number)) throw std::invalid_argument(expected);
    const double v = std::stod(m[1].str());
    if (!(v <= 255.0)) throw std::invalid_argument(expected);
    values.push_back(static_cast<float>(v));
  }
  if (!text.empty() && text.back() == ',') throw std::invalid_argument(expected);
  if (values.size() == 1) return std::array<float, 3>{values[0], values[0], values[0]};
  if (values.size() == 3) return std::array<float, 3>{values[0], values[1], values[2]};
  throw std::invalid_argument(expected);
}

std::string fill_text(const Fill& fill) {
  if (!fill) return "";
  std::ostringstream s;
  const auto& f = *fill;
  if (f[0] == f[1] && f[1] == f[2]) {
    s << f[0];
  } else {
    s << f[0] << "," << f[1] << "," << f[2];
  }
  return s.str();
}

}  // namespace pinfeed::pipeline::augment
