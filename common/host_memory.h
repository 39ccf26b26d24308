// The memory this process may still use: MemAvailable and every cgroup limit that applies to it. The parsers take
// file contents or a root folder, so tests feed them made-up /proc and /sys/fs/cgroup trees; read_host_memory()
// reads the real ones. The plan (app/plan) and the Python module check the host batch rings against it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pinfeed::common {

// A cgroup's memory: the lowest limit on the way from the process's cgroup to the root (a parent's limit applies
// to its children too) and the least room left under any of them (limit - usage, page cache the kernel drops
// before it OOM-kills left out).
struct CgroupMemory {
  double limit = 0;  // bytes; 0: no limit
  double room = 0;   // bytes; meaningful only with a limit
};

struct HostMemory {
  double available = 0;     // bytes this process may still allocate: min(MemAvailable, every cgroup's room); 0: unknown
  double total = 0;         // physical RAM, or the lowest cgroup limit where lower; 0: unknown
  double cgroup_limit = 0;  // the lowest cgroup limit that applies; 0: none
};

// MemAvailable of /proc/meminfo's text, in bytes; nullopt without one (kernels before 3.14).
std::optional<double> mem_available(std::string_view meminfo);
// The process's cgroup path in /proc/self/cgroup's text: the v2 "0::/path" line, or the v1 line whose
// controllers include "memory". nullopt without one.
std::optional<std::string> cgroup_v2_path(std::string_view proc_self_cgroup);
std::optional<std::string> cgroup_v1_memory_path(std::string_view proc_self_cgroup);
// The limits under a v2 mount (`root`: /sys/fs/cgroup; memory.max, "max" = none, memory.current) or a v1 memory
// mount (`root`: /sys/fs/cgroup/memory; memory.limit_in_bytes, a huge value = none, memory.usage_in_bytes),
// walking `path` up to the root. A folder that is not there is skipped: inside a container the mount shows the
// container's own cgroup at the root while /proc/self/cgroup names the host's path.
CgroupMemory cgroup_v2_memory(const std::string& root, const std::string& path);
CgroupMemory cgroup_v1_memory(const std::string& root, const std::string& path);
// All of it together: `cgroup_root` holds the v2 files at its top and the v1 memory mount in memory/ (as
// /sys/fs/cgroup does); `physical` is the machine's RAM in bytes (0: unknown).
HostMemory host_memory(const std::string& cgroup_root, std::string_view proc_self_cgroup, std::string_view meminfo,
                       double physical);
// This process on this machine, or what a ScopedHostMemory in force says.
HostMemory read_host_memory();

// Tests: read_host_memory() returns `fake` while this lives, so a check can be driven past a known limit without
// depending on the machine's memory.
class ScopedHostMemory {
 public:
  explicit ScopedHostMemory(HostMemory fake);
  ~ScopedHostMemory();
  ScopedHostMemory(const ScopedHostMemory&) = delete;
  ScopedHostMemory& operator=(const ScopedHostMemory&) = delete;

 private:
  std::optional<HostMemory> previous_;
};

}  // namespace pinfeed::common
