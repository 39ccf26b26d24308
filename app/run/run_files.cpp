#include "app/run/run_files.h"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

namespace pinfeed::app {
namespace fs = std::filesystem;

std::string make_run_dir(const std::string& dir, const std::string& name) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  std::string path = (fs::path(dir) / (std::string(stamp) + "-" + name)).string();
  for (int i = 2; fs::exists(path); ++i) path = (fs::path(dir) / (std::string(stamp) + "-" + name + "-" + std::to_string(i))).string();
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw engine::OutputError("cannot create run directory " + path + ": " + ec.message());
  return path;
}

std::string run_name_of(const std::string& run_dir) {
  const fs::path dir(run_dir);
  std::error_code ec;
  if (fs::is_regular_file(dir / "run.json", ec)) {
    std::ifstream in(dir / "run.json");
    const nlohmann::json record = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains("name") && record["name"].is_string()) return record["name"];
  }
  if (fs::is_regular_file(dir / "config.toml", ec)) {
    try {
      const toml::table config = toml::parse_file((dir / "config.toml").string());
      if (const auto name = config["run"]["name"].value<std::string>()) return *name;
    } catch (const toml::parse_error&) {
      // not a config pinfeed wrote: no name
    }
  }
  return "";
}

std::string find_last_run(const std::string& dir, const std::string& name) {
  // (time stamp, collision suffix): "20260101-120000-x-10" is newer than "20260101-120000-x-9".
  std::tuple<std::string, int64_t, std::string> best;
  std::string found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_directory(ec)) continue;
    if (!fs::exists(entry.path() / "last.pt", ec) && !fs::exists(entry.path() / "best.pt", ec)) continue;
    if (run_name_of(entry.path().string()) != name) continue;
    const std::string folder = entry.path().filename().string();
    const std::string stem = folder.substr(0, std::min<size_t>(15, folder.size()));  // YYYYmmdd-HHMMSS
    int64_t suffix = 1;
    const std::string plain = stem + "-" + name;
    if (folder.size() > plain.size() + 1 && folder.compare(0, plain.size() + 1, plain + "-") == 0) {
      const std::string n = folder.substr(plain.size() + 1);
      if (!n.empty() && n.size() < 9 && n.find_first_not_of("0123456789") == std::string::npos) suffix = std::stoll(n);
    }
    auto key = std::make_tuple(stem, suffix, folder);
    if (found.empty() || key > best) {
      best = std::move(key);
      found = entry.path().string();
    }
  }
  return found;
}

}  // namespace pinfeed::app
