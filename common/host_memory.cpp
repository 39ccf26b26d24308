#include "common/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace pinfeed::common {
namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The first number of a file's text; nullopt for none ("max", empty, a missing file).
std::optional<double> number_in(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  const char* begin = text->c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (end == begin) return std::nullopt;
  return value;
}

// `key`'s value in a "key value" per line file (memory.stat); 0 without it.
double stat_value(const std::optional<std::string>& text, std::string_view key) {
  if (!text) return 0;
  std::istringstream lines(*text);
  for (std::string name; lines >> name;) {
    double value = 0;
    if (!(lines >> value)) return 0;
    if (name == key) return value;
  }
  return 0;
}

// v1 writes "no limit" as the largest page-aligned 64-bit value; anything past an exbibyte is taken as that.
constexpr double kNoLimitV1 = 1152921504606846976.0;  // 2^60

struct CgroupFiles {
  const char* limit;          // memory.max | memory.limit_in_bytes
  const char* usage;          // memory.current | memory.usage_in_bytes
  const char* inactive_file;  // its name in memory.stat (the whole subtree's in v1)
};

// Folders from root/path up to root itself; each level that holds a limit lowers the result. The page cache the
// kernel can drop (inactive files: a dataset read a moment ago) counts in usage but not against the OOM killer.
CgroupMemory walk_up(const std::string& root, std::string path, const CgroupFiles& files) {
  CgroupMemory result;
  while (!path.empty() && path.back() == '/') path.pop_back();
  for (;;) {
    const std::string dir = root + path + "/";
    const std::optional<double> limit = number_in(read_text(dir + files.limit));
    if (limit && *limit > 0 && *limit < kNoLimitV1) {
      const double usage = number_in(read_text(dir + files.usage)).value_or(0);
      const double cache = stat_value(read_text(dir + "memory.stat"), files.inactive_file);
      const double room = std::max(0.0, *limit - std::max(0.0, usage - cache));
      result.room = result.limit > 0 ? std::min(result.room, room) : room;
      result.limit = result.limit > 0 ? std::min(result.limit, *limit) : *limit;
    }
    if (path.empty()) break;
    path.erase(path.rfind('/'));
  }
  return result;
}

// The path of the /proc/self/cgroup line "ID:CONTROLLERS:PATH" whose controllers `want` accepts.
template <class Want>
std::optional<std::string> cgroup_line(std::string_view text, Want want) {
  std::istringstream lines{std::string(text)};
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find(':'), second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    if (want(line.substr(first + 1, second - first - 1), line.substr(0, first))) return line.substr(second + 1);
  }
  return std::nullopt;
}

std::optional<HostMemory>& fake_memory() {
  static std::optional<HostMemory> fake;
  return fake;
}

}  // namespace

std::optional<double> mem_available(std::string_view meminfo) {
  std::istringstream lines{std::string(meminfo)};
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    const std::optional<double> kib = number_in(line.substr(13));
    if (kib) return *kib * 1024;  // the kernel writes "kB", meaning KiB
  }
  return std::nullopt;
}

std::optional<std::string> cgroup_v2_path(std::string_view proc_self_cgroup) {
  return cgroup_line(proc_self_cgroup, [](const std::string& controllers, const std::string& id) {
    return id == "0" && controllers.empty();
  });
}

std::optional<std::string> cgroup_v1_memory_path(std::string_view proc_self_cgroup) {
  return cgroup_line(proc_self_cgroup, [](const std::string& controllers, const std::string&) {
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');) {
      if (name == "memory") return true;
    }
    return false;
  });
}

CgroupMemory cgroup_v2_memory(const std::string& root, const std::string& path) {
  return walk_up(root, path, {"memory.max", "memory.current", "inactive_file"});
}

CgroupMemory cgroup_v1_memory(const std::string& root, const std::string& path) {
  return walk_up(root, path, {"memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"});
}

HostMemory host_memory(const std::string& cgroup_root, std::string_view proc_self_cgroup, std::string_view meminfo,
                       double physical) {
  HostMemory m;
  m.total = physical;
  m.available = mem_available(meminfo).value_or(physical);
  // Hybrid hosts list both; each hierarchy that limits memory applies.
  std::optional<CgroupMemory> cgroups[2];
  if (auto path = cgroup_v2_path(proc_self_cgroup)) cgroups[0] = cgroup_v2_memory(cgroup_root, *path);
  if (auto path = cgroup_v1_memory_path(proc_self_cgroup)) cgroups[1] = cgroup_v1_memory(cgroup_root + "/memory", *path);
  for (const auto& cg : cgroups) {
    if (!cg || cg->limit <= 0) continue;
    m.cgroup_limit = m.cgroup_limit > 0 ? std::min(m.cgroup_limit, cg->limit) : cg->limit;
    m.total = m.total > 0 ? std::min(m.total, cg->limit) : cg->limit;
    m.available = m.available > 0 ? std::min(m.available, cg->room) : cg->room;
  }
  return m;
}

HostMemory read_host_memory() {
  if (fake_memory()) return *fake_memory();
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const double physical = pages > 0 && page > 0 ? static_cast<double>(pages) * page : 0;
  return host_memory("/sys/fs/cgroup", read_text("/proc/self/cgroup").value_or(""),
                     read_text("/proc/meminfo").value_or(""), physical);
}

ScopedHostMemory::ScopedHostMemory(HostMemory fake) : previous_(fake_memory()) { fake_memory() = fake; }
ScopedHostMemory::~ScopedHostMemory() { fake_memory() = previous_; }

}  // namespace pinfeed::common
