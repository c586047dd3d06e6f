#include "loom/agent/mig_devices.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

TEST(MigDevicesTest, TheInstancesCapabilityDevicesFromTheDriver) {
  const fs::path root = fs::temp_directory_path() / "loom-mig-devices-test";
  fs::remove_all(root);
  const fs::path gi = root / "proc/driver/nvidia/capabilities/gpu2/mig/gi7";
  Write(gi / "access", "DeviceFileMinor: 66\nDeviceFileMode: 292\n");
  Write(gi / "ci0/access", "DeviceFileMinor: 67\nDeviceFileMode: 292\n");
  Write(gi / "ci10/access", "DeviceFileMinor: 70\n");
  Write(gi / "ci2/access", "garbage\n");
  Write(root / "proc/driver/nvidia/capabilities/gpu2/mig/gi8/access",
        "DeviceFileMinor: 80\n");
  EXPECT_EQ(MigCapabilityDevices(root.string(), 2, 7),
            (std::vector<std::string>{"nvidia-caps/nvidia-cap66",
                                      "nvidia-caps/nvidia-cap67",
                                      "nvidia-caps/nvidia-cap70"}));
  // No such instance, an emulated GPU (no minor), no driver at all.
  EXPECT_TRUE(MigCapabilityDevices(root.string(), 2, 9).empty());
  EXPECT_TRUE(MigCapabilityDevices(root.string(), -1, 7).empty());
  EXPECT_TRUE(MigCapabilityDevices((root / "none").string(), 2, 7).empty());
  fs::remove_all(root);
}

}  // namespace
}  // namespace loom
