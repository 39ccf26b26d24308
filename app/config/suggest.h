// "Did you mean" for names typed by hand: config keys, subcommands, help topics, bench rows.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace pinfeed::app {

// Levenshtein distance (insert, delete, substitute: 1 each).
inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The candidate nearest to `typed`, or "" when none is near enough to be the likely intent: at most a third of
// the longer name's letters differ (and at least 2 may), so a short typo finds its word and a different word
// does not.
inline std::string nearest(const std::string& typed, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(typed, c);
    const size_t allowed = std::max<size_t>(2, std::max(typed.size(), c.size()) / 3);
    if (d <= allowed && d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

// "; did you mean 'x'?" when there is a near candidate, else "".
inline std::string did_you_mean(const std::string& typed, const std::vector<std::string>& candidates) {
  const std::string n = nearest(typed, candidates);
  return n.empty() ? "" : "; did you mean '" + n + "'?";
}

}  // namespace pinfeed::app
