#include "app/run/run_record.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>
#include <unistd.h>

#include <cctype>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/config/config.h"
#include "app/run/metrics.h"
#include "app/run/run_files.h"
#include "gpu/gpu.h"

// Set by app/CMakeLists.txt when configuring: the project's version, and the commit of the checkout it was
// configured in (absent outside a git checkout).
#ifndef PINFEED_VERSION
#define PINFEED_VERSION "unknown"
#endif

namespace pinfeed::app {
namespace fs = std::filesystem;
namespace {

std::string text_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The process's argv as the kernel holds it: main() need not hand it down.
nlohmann::json command_line() {
  nlohmann::json args = nlohmann::json::array();
  const std::string raw = text_of("/proc/self/cmdline");
  for (size_t at = 0; at < raw.size();) {
    const size_t end = raw.find('\0', at);
    args.push_back(raw.substr(at, end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return args;
}

std::string now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[40];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S%z", &tm);
  return stamp;
}

// The NVIDIA kernel driver's version ("580.159.04"), which CUDA's API does not report; null without one.
nlohmann::json nvidia_driver() {
  const std::string version = nvidia_driver_version(text_of("/proc/driver/nvidia/version"));
  return version.empty() ? nlohmann::json(nullptr) : nlohmann::json(version);
}

}  // namespace

std::string nvidia_driver_version(const std::string& text) {
  // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...": the first word of
  // the first line made of digits and dots only, with a dot (the words before it vary between driver flavours).
  std::istringstream line(text.substr(0, text.find('\n')));
  for (std::string word; line >> word;) {
    const bool digits_and_dots = word.find_first_not_of("0123456789.") == std::string::npos;
    if (digits_and_dots && word.find('.') != std::string::npos && std::isdigit(static_cast<unsigned char>(word[0]))) return word;
  }
  return "";
}

nlohmann::json start_record(const RunStart& s, const std::string& config_file) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::error_code ec;
  const std::string cwd = fs::current_path(ec).string();
  nlohmann::json r = {
      {"time", now_iso8601()},
      {"command", command_line()},
      {"cwd", cwd},
      {"host", host},
      {"pid", static_cast<int64_t>(::getpid())},
      {"pinfeed_version", PINFEED_VERSION},
#ifdef PINFEED_GIT_COMMIT
      {"git_commit", PINFEED_GIT_COMMIT},
#else
      {"git_commit", nullptr},
#endif
      {"libtorch", TORCH_VERSION},
      {"device", s.device},
      {"world_size", s.world_size},
      {"config", config_file},
  };
  // CUDA figures only when the run uses CUDA: asking on a CPU run would initialise CUDA for nothing.
  nlohmann::json gpu_name = nullptr, cuda = nullptr, cudnn = nullptr, driver = nullptr;
  if (s.device.rfind("cuda", 0) == 0 && gpu::available()) {
    const gpu::DeviceInfo info = gpu::device_info(c10::Device(s.device).has_index() ? c10::Device(s.device).index() : 0);
    gpu_name = info.name;
    cuda = info.runtime;
    driver = nvidia_driver();
    if (driver.is_null()) driver = "CUDA " + info.driver;
    const at::CUDAHooksInterface& hooks = at::detail::getCUDAHooks();
    if (hooks.hasCuDNN()) {
      const long v = hooks.versionCuDNN();  // e.g. 91002 = 9.10.2
      cudnn = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
    }
  }
  r["gpu"] = gpu_name;  // rank 0's GPU: with several ranks, world_size processes of one GPU each
  r["cuda"] = cuda;
  r["cudnn"] = cudnn;
  r["driver"] = driver;
  if (!s.checkpoint.empty()) {
    r["resumed_from"] = {{"checkpoint", s.checkpoint}, {"epoch", s.resume_epoch}, {"step", s.resume_step}};
  } else {
    r["resumed_from"] = nullptr;
  }
  return r;
}

void append_start_record(const std::string& dir, const std::string& run_name, const nlohmann::json& record) {
  const std::string path = (fs::path(dir) / "run.json").string();
  nlohmann::json doc;
  std::error_code ec;
  if (fs::exists(path, ec)) {
    doc = nlohmann::json::parse(text_of(path), nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object() || !doc.contains("starts") || !doc["starts"].is_array()) {
      std::string kept = path + ".damaged";
      for (int i = 2; fs::exists(kept, ec); ++i) kept = path + ".damaged-" + std::to_string(i);
      fs::rename(path, kept, ec);
      doc = nlohmann::json();
    }
  }
  if (doc.is_null()) doc = {{"format", 1}, {"name", run_name}, {"starts", nlohmann::json::array()}};
  doc["starts"].push_back(record);
  engine::write_file_atomic(path, doc.dump(2) + "\n");
}

namespace {

// The run.json append_start_record writes: an object holding a "starts" list.
bool is_pinfeed_run_json(const fs::path& file) {
  const nlohmann::json doc = nlohmann::json::parse(text_of(file.string()), nullptr, /*allow_exceptions=*/false);
  return doc.is_object() && doc.contains("starts") && doc["starts"].is_array();
}

// A folder an older pinfeed wrote (no run.json), or one whose run.json was damaged: its config.toml is a pinfeed
// config (every key one pinfeed knows) and its metrics file starts as pinfeed starts it.
bool has_pinfeed_config_and_metrics(const fs::path& d) {
  std::error_code ec;
  if (!fs::is_regular_file(d / "config.toml", ec)) return false;
  try {
    load_config((d / "config.toml").string());
  } catch (const std::exception&) {
    return false;
  }
  std::string first;
  if (std::ifstream jsonl(d / "metrics.jsonl"); jsonl && std::getline(jsonl, first)) {
    const nlohmann::json row = nlohmann::json::parse(first, nullptr, /*allow_exceptions=*/false);
    return row.is_object() && row.contains(kEpochMetrics[0].name);
  }
  const std::string header = std::string(kEpochMetrics[0].name) + "," + kEpochMetrics[1].name + ",";
  std::ifstream csv(d / "metrics.csv");
  return csv && std::getline(csv, first) && first.rfind(header, 0) == 0;
}

}  // namespace

bool is_run_folder(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (fs::is_regular_file(d / "run.json", ec) && is_pinfeed_run_json(d / "run.json")) return true;
  return has_pinfeed_config_and_metrics(d);
}

}  // namespace pinfeed::app
