// The memory a process may use, read from made-up /proc and /sys/fs/cgroup trees, and ResNet-50's step estimate.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "app/plan/memory.h"
#include "test_util.h"

namespace pinfeed::app {
namespace {

namespace fs = std::filesystem;
constexpr double kGiB = 1 << 30;

void put(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

const char* kMeminfo = "MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20971520 kB\n";

TEST(HostMemory, MemAvailableIsReadInKibibytes) {
  EXPECT_EQ(mem_available(kMeminfo), 20.0 * kGiB);
  EXPECT_FALSE(mem_available("MemTotal: 1 kB\n").has_value());
}

TEST(HostMemory, TheProcessCgroupPathIsFoundForEachVersion) {
  const char* hybrid = "4:memory:/process_api/abc\n3:cpuset:/\n0::/user.slice/app.scope\n";
  EXPECT_EQ(cgroup_v2_path(hybrid), "/user.slice/app.scope");
  EXPECT_EQ(cgroup_v1_memory_path(hybrid), "/process_api/abc");
  EXPECT_EQ(cgroup_v1_memory_path("5:cpu,memory,blkio:/docker/x\n"), "/docker/x");
  EXPECT_FALSE(cgroup_v1_memory_path("0::/a\n").has_value());
  EXPECT_FALSE(cgroup_v2_path("4:memory:/a\n").has_value());
  EXPECT_FALSE(cgroup_v2_path("").has_value());
}

TEST(HostMemory, CgroupV2TakesTheTightestLimitOfTheProcessAndItsParents) {
  const fs::path root = test::fresh_dir("memory_v2_nested");
  put(root / "memory.max", "max\n");  // not in a real root, harmless here
  put(root / "jobs/memory.max", std::to_string(int64_t(8 * kGiB)) + "\n");
  put(root / "jobs/memory.current", std::to_string(int64_t(7 * kGiB)) + "\n");  // the siblings use 7 of its 8
  put(root / "jobs/me/memory.max", std::to_string(int64_t(16 * kGiB)) + "\n");
  put(root / "jobs/me/memory.current", std::to_string(int64_t(2 * kGiB)) + "\n");
  put(root / "jobs/me/memory.stat", "anon 1000\ninactive_file " + std::to_string(int64_t(1 * kGiB)) + "\n");
  const CgroupMemory m = cgroup_v2_memory(root.string(), "/jobs/me");
  EXPECT_EQ(m.limit, 8 * kGiB);
  EXPECT_EQ(m.room, 1 * kGiB) << "the parent's room, not the child's 16 - (2 - 1)";
  // The child alone: its own room, page cache the kernel drops not counted as used.
  fs::remove(root / "jobs/memory.max");
  EXPECT_EQ(cgroup_v2_memory(root.string(), "/jobs/me").room, 15 * kGiB);

  const HostMemory host = host_memory(root.string(), "0::/jobs/me\n", kMeminfo, 32 * kGiB);
  EXPECT_EQ(host.cgroup_limit, 16 * kGiB);
  EXPECT_EQ(host.total, 16 * kGiB);
  EXPECT_EQ(host.available, 15 * kGiB) << "lower than MemAvailable's 20";
}

TEST(HostMemory, CgroupV2MaxMeansNoLimitAndMemAvailableDecides) {
  const fs::path root = test::fresh_dir("memory_v2_max");
  put(root / "a/memory.max", "max\n");
  put(root / "a/memory.current", "123456\n");
  EXPECT_EQ(cgroup_v2_memory(root.string(), "/a").limit, 0);
  const HostMemory host = host_memory(root.string(), "0::/a\n", kMeminfo, 32 * kGiB);
  EXPECT_EQ(host.cgroup_limit, 0);
  EXPECT_EQ(host.total, 32 * kGiB);
  EXPECT_EQ(host.available, 20 * kGiB);
}

TEST(HostMemory, CgroupV1ReadsTheMemoryControllersFolderAndIgnoresItsHugeNoLimit) {
  const fs::path root = test::fresh_dir("memory_v1");
  put(root / "memory/memory.limit_in_bytes", "9223372036854771712\n");  // the root: no limit
  put(root / "memory/memory.usage_in_bytes", std::to_string(int64_t(30 * kGiB)) + "\n");
  put(root / "memory/docker/x/memory.limit_in_bytes", std::to_string(int64_t(6 * kGiB)) + "\n");
  put(root / "memory/docker/x/memory.usage_in_bytes", std::to_string(int64_t(3 * kGiB)) + "\n");
  put(root / "memory/docker/x/memory.stat", "cache 5\ntotal_inactive_file " + std::to_string(int64_t(kGiB)) + "\n");
  const HostMemory host = host_memory(root.string(), "4:memory:/docker/x\n0::/\n", kMeminfo, 32 * kGiB);
  EXPECT_EQ(host.cgroup_limit, 6 * kGiB);
  EXPECT_EQ(host.total, 6 * kGiB);
  EXPECT_EQ(host.available, 4 * kGiB);
  // Unlimited all the way up: MemAvailable.
  EXPECT_EQ(host_memory(root.string(), "4:memory:/\n", kMeminfo, 32 * kGiB).available, 20 * kGiB);
}

TEST(HostMemory, AContainersPathMissingFromItsOwnMountFallsBackToTheMountsRoot) {
  // /proc/self/cgroup names the host's path; the container sees its own cgroup at the mount's root.
  const fs::path root = test::fresh_dir("memory_v2_container");
  put(root / "memory.max", std::to_string(int64_t(4 * kGiB)) + "\n");
  put(root / "memory.current", std::to_string(int64_t(kGiB)) + "\n");
  const HostMemory host = host_memory(root.string(), "0::/kubepods/pod1/abc\n", kMeminfo, 32 * kGiB);
  EXPECT_EQ(host.cgroup_limit, 4 * kGiB);
  EXPECT_EQ(host.available, 3 * kGiB);
}

TEST(HostMemory, NoCgroupLeavesMemAvailableAndThePhysicalMemory) {
  const fs::path root = test::fresh_dir("memory_none");
  const HostMemory host = host_memory(root.string(), "", kMeminfo, 32 * kGiB);
  EXPECT_EQ(host.cgroup_limit, 0);
  EXPECT_EQ(host.total, 32 * kGiB);
  EXPECT_EQ(host.available, 20 * kGiB);
  EXPECT_EQ(host_memory(root.string(), "", "", 32 * kGiB).available, 32 * kGiB) << "no MemAvailable: the RAM";
}

TEST(HostMemory, ThisMachinesFiguresAreReadAndAFakeReplacesThem) {
  const HostMemory real = read_host_memory();
  EXPECT_GT(real.total, 0);
  EXPECT_GT(real.available, 0);
  EXPECT_LE(real.available, real.total * 1.01);
  {
    const ScopedHostMemory fake({1 * kGiB, 2 * kGiB, 2 * kGiB});
    EXPECT_EQ(read_host_memory().available, 1 * kGiB);
  }
  EXPECT_EQ(read_host_memory().total, real.total);
}

TEST(StepMemory, ActivationsGrowWithBatchPixelsAndElementSize) {
  const model::ArchSpec& r50 = model::spec_of(model::Arch::kResNet50);
  // Summed from the architecture: 21.27 M elements for a 224 px image.
  EXPECT_NEAR(saved_elements_per_pixel(r50) * 224 * 224, 21.27e6, 0.01e6);
  // BlurPool: layer2 (128 + 256) x 56^2, layer3 (256 + 512) x 28^2, layer4 (512 + 1024) x 14^2 more.
  EXPECT_NEAR((saved_elements_per_pixel(r50, true) - saved_elements_per_pixel(r50)) * 224 * 224,
              384 * 3136 + 768 * 784 + 1536 * 196, 1);
  const double one = activation_bytes(r50, 1, 224, 4);
  EXPECT_GT(one, 85e6) << "at least the saved tensors themselves";
  EXPECT_LT(one, 200e6);
  EXPECT_DOUBLE_EQ(activation_bytes(r50, 32, 224, 4), 32 * one);
  EXPECT_DOUBLE_EQ(activation_bytes(r50, 1, 448, 4), 4 * one);
  EXPECT_DOUBLE_EQ(activation_bytes(r50, 1, 224, 2), one / 2);
  EXPECT_GT(model_state_bytes(r50, 1000), 4 * 25.5e6 * 3);
  EXPECT_GT(model_state_bytes(r50, 20000), model_state_bytes(r50, 10));
}

TEST(StepMemory, DeeperAndWiderNetworksKeepMoreAndHoldMoreState) {
  auto kept = [](model::Arch a) { return saved_elements_per_pixel(model::spec_of(a)); };
  EXPECT_LT(kept(model::Arch::kResNet18), kept(model::Arch::kResNet34));
  EXPECT_LT(kept(model::Arch::kResNet34), kept(model::Arch::kResNet50));
  EXPECT_LT(kept(model::Arch::kResNet50), kept(model::Arch::kResNet101));
  EXPECT_LT(kept(model::Arch::kResNet101), kept(model::Arch::kResNet152));
  EXPECT_LT(kept(model::Arch::kResNet50), kept(model::Arch::kWideResNet50_2));
  EXPECT_LT(kept(model::Arch::kResNet50), kept(model::Arch::kResNeXt50_32x4d));
  const model::ArchSpec& r18 = model::spec_of(model::Arch::kResNet18);
  EXPECT_LT(model_state_bytes(r18, 1000), model_state_bytes(model::spec_of(model::Arch::kResNet50), 1000));
}

}  // namespace
}  // namespace pinfeed::app
