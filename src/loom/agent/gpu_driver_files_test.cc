// The GPU driver files of a container task (gpu_driver_files.h): from a CDI
// spec (devices by UUID or index, the spec's own edits, the host's links to
// the libraries it mounts, hooks not run), and without one from the
// directory of the NVML library loaded (only the driver's files, only
// regular files and links to them inside that directory, of the driver's
// version), with each GPU's device found by its minor number.

#include "loom/agent/gpu_driver_files.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using agent_testing::TempDir;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

void WriteDriverTestFile(const std::string& path,
                         const std::string& text = "x") {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// container path -> host path
std::map<std::string, std::string> DevicesOf(const GpuDriverFiles& f) {
  std::map<std::string, std::string> out;
  for (const DriverDevice& d : f.devices) out[d.container_path] = d.host_path;
  return out;
}
std::map<std::string, std::string> MountsOf(const GpuDriverFiles& f) {
  std::map<std::string, std::string> out;
  for (const DriverMount& m : f.mounts) {
    EXPECT_TRUE(out.emplace(m.container_path, m.host_path).second)
        << m.container_path << " mounted twice";
  }
  return out;
}

// A host of four GPUs: stand-in device files under dev/, a "driver"
// directory with a library and its links, and a CDI spec naming GPU 1 by
// UUID and GPU 3 by index.
class CdiHost {
 public:
  CdiHost() {
    for (const char* name : {"nvidia0", "nvidia1", "nvidia2", "nvidia3",
                             "nvidia7", "nvidiactl", "nvidia-uvm"}) {
      WriteDriverTestFile(dev() + "/" + name);
    }
    WriteDriverTestFile(lib() + "/libcuda.so.580.95.05", "libcuda");
    fs::create_symlink("libcuda.so.580.95.05", lib() + "/libcuda.so.1");
    fs::create_symlink("libcuda.so.1", lib() + "/libcuda.so");
    // Links to other files, or of other names: not the library's.
    WriteDriverTestFile(lib() + "/libcuda.so.535.1.1", "old libcuda");
    fs::create_symlink("libcuda.so.535.1.1", lib() + "/libcuda.so.2");
    fs::create_symlink("libcuda.so.580.95.05", lib() + "/libother.so.1");
    WriteDriverTestFile(bin() + "/nvidia-smi", "smi");
    WriteDriverTestFile(hook_marker_dir() + "/.keep");
    WriteSpec(
        cdi() + "/nvidia.yaml",
        absl::StrCat(
            R"(cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "1"
  containerEdits:
    deviceNodes: [{path: /dev/nvidia9, hostPath: /nonexistent}]
- name: GPU-aaaa-1
  containerEdits:
    deviceNodes: [{path: /dev/nvidia7, hostPath: )",
            dev(), R"(/nvidia7}]
- name: "3"
  containerEdits:
    deviceNodes: [{path: /dev/nvidia3, hostPath: )",
            dev(), R"(/nvidia3}]
    env: [GPU3_EDIT=yes]
- name: "0"
  containerEdits:
    deviceNodes: [{path: /dev/nvidia0, hostPath: )",
            dev(), R"(/nvidia0}]
- name: all
  containerEdits:
    deviceNodes: [{path: /dev/nvidia2, hostPath: )",
            dev(), R"(/nvidia2}]
containerEdits:
  env: [NVIDIA_VISIBLE_DEVICES=void, FROM_CDI=1]
  deviceNodes: [{path: /dev/nvidiactl, hostPath: )",
            dev(), R"(/nvidiactl}]
  mounts:
  - {hostPath: )",
            lib(),
            R"(/libcuda.so.580.95.05, containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05, options: [ro, nosuid, nodev, bind]}
  - {hostPath: )",
            bin(),
            R"(/nvidia-smi, containerPath: /usr/bin/nvidia-smi, options: [ro, bind]}
  - {hostPath: /nonexistent/libgone.so.1, containerPath: /usr/lib/libgone.so.1}
  - {hostPath: /tmp, containerPath: /scratch, type: tmpfs}
  hooks:
  - {hookName: createContainer, path: /bin/sh, args: [sh, -c, "touch )",
            hook_marker_dir(),
            R"(/ran"]}
)"));
  }

  std::string dev() const { return tmp_.path() + "/dev"; }
  std::string lib() const { return tmp_.path() + "/lib"; }
  std::string bin() const { return tmp_.path() + "/bin"; }
  std::string cdi() const { return tmp_.path() + "/cdi"; }
  std::string hook_marker_dir() const { return tmp_.path() + "/hook"; }
  const std::string& root() const { return tmp_.path(); }

  GpuDriverOptions Options() const {
    GpuDriverOptions o;
    o.cdi_dirs = {cdi()};
    o.device_dir = dev();
    return o;
  }
  static void WriteSpec(const std::string& path, const std::string& text) {
    WriteDriverTestFile(path, text);
  }

 private:
  TempDir tmp_;
};

TEST(GpuDriverFilesTest, NoGpusNoFiles) {
  CdiHost host;
  const GpuDriverFiles f = FindGpuDriverFiles({}, host.Options());
  EXPECT_EQ(f.source, GpuDriverFiles::Source::kNone);
  EXPECT_THAT(f.devices, IsEmpty());
  EXPECT_THAT(f.mounts, IsEmpty());
  EXPECT_THAT(f.env, IsEmpty());
}

TEST(GpuDriverFilesTest, ACdiSpecGivesTheEditsOfTheTasksGpusOnly) {
  CdiHost host;
  // GPU 1 is named by UUID (the spec's "1" is another device: a UUID wins);
  // GPU 3 by index.
  const GpuDriverFiles f =
      FindGpuDriverFiles({{.index = 1, .uuid = "GPU-aaaa-1", .minor = 1},
                          {.index = 3, .uuid = "GPU-aaaa-3", .minor = 3}},
                         host.Options());
  EXPECT_EQ(f.source, GpuDriverFiles::Source::kCdi);
  EXPECT_THAT(f.from, ElementsAre(host.cdi() + "/nvidia.yaml"));
  // The devices of GPUs 1 and 3 and the spec's control device; the node's
  // nvidia-uvm besides (the spec lacks it); nothing of GPUs 0 and 2.
  EXPECT_EQ(DevicesOf(f), (std::map<std::string, std::string>{
                              {"/dev/nvidia7", host.dev() + "/nvidia7"},
                              {"/dev/nvidia3", host.dev() + "/nvidia3"},
                              {"/dev/nvidiactl", host.dev() + "/nvidiactl"},
                              {"/dev/nvidia-uvm", host.dev() + "/nvidia-uvm"},
                          }));
  // The library, and the host's links to it beside it (what the hooks would
  // have made); the program; nothing missing, nothing not a bind mount.
  const std::string in = "/usr/lib/x86_64-linux-gnu";
  const std::string real = host.lib() + "/libcuda.so.580.95.05";
  EXPECT_EQ(MountsOf(f),
            (std::map<std::string, std::string>{
                {in + "/libcuda.so.580.95.05", real},
                {in + "/libcuda.so.1", real},
                {in + "/libcuda.so", real},
                {"/usr/bin/nvidia-smi", host.bin() + "/nvidia-smi"},
            }));
  for (const DriverMount& m : f.mounts) EXPECT_TRUE(m.readonly);
  EXPECT_THAT(f.library_dirs, ElementsAre(in));
  EXPECT_THAT(f.binary_dirs, IsEmpty());
  EXPECT_THAT(f.env, ElementsAre("NVIDIA_VISIBLE_DEVICES=void", "FROM_CDI=1",
                                 "GPU3_EDIT=yes"));
  // The hook was not run.
  EXPECT_EQ(f.hooks_not_run, 1);
  EXPECT_FALSE(fs::exists(host.hook_marker_dir() + "/ran"));
  // What was skipped is said.
  EXPECT_THAT(f.warnings, Contains(HasSubstr("/nonexistent/libgone.so.1")));
  EXPECT_THAT(f.warnings, Contains(HasSubstr("of type tmpfs")));
  EXPECT_THAT(DescribeGpuDriverFiles(f), HasSubstr("1 hooks not run"));
}

TEST(GpuDriverFilesTest, LaterSpecsWinAndUnnamedGpusKeepTheirDevice) {
  CdiHost host;
  const std::string later = host.root() + "/run-cdi";
  CdiHost::WriteSpec(later + "/override.json",
                     absl::StrCat(R"({
    "cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
    "devices": [{"name": "3", "containerEdits": {"deviceNodes": [
      {"path": "/dev/nvidia3", "hostPath": ")",
                                  host.dev(), R"(/nvidia1"}]}}]})"));
  GpuDriverOptions o = host.Options();
  o.cdi_dirs.push_back(later);
  // GPU 3 from the later spec only (not its edits in the first one); GPU 2
  // is in no spec ("all" is not its name): its own device, by minor, and a
  // warning.
  const GpuDriverFiles f =
      FindGpuDriverFiles({{.index = 3, .uuid = "GPU-aaaa-3", .minor = 3},
                          {.index = 2, .uuid = "GPU-aaaa-2", .minor = 2}},
                         o);
  EXPECT_EQ(f.source, GpuDriverFiles::Source::kCdi);
  EXPECT_THAT(f.from, ElementsAre(later + "/override.json"));
  EXPECT_EQ(DevicesOf(f), (std::map<std::string, std::string>{
                              {"/dev/nvidia3", host.dev() + "/nvidia1"},
                              {"/dev/nvidia2", host.dev() + "/nvidia2"},
                              {"/dev/nvidiactl", host.dev() + "/nvidiactl"},
                              {"/dev/nvidia-uvm", host.dev() + "/nvidia-uvm"},
                          }));
  EXPECT_THAT(f.mounts, IsEmpty());
  EXPECT_THAT(f.env, IsEmpty());
  EXPECT_THAT(f.warnings, Contains(HasSubstr("GPU 2 (GPU-aaaa-2) is in no "
                                             "CDI spec")));
}

TEST(GpuDriverFilesTest, MalformedOrForeignSpecsAreNotUsed) {
  CdiHost host;
  GpuDriverOptions o = host.Options();
  o.cdi_dirs = {host.root() + "/bad-cdi"};
  CdiHost::WriteSpec(host.root() + "/bad-cdi/nvidia.yaml",
                     "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
                     "- name: \"0\"\n  containerEdits:\n    mounts:\n"
                     "    - {hostPath: relative, containerPath: /x}\n");
  CdiHost::WriteSpec(host.root() + "/bad-cdi/names-none.yaml",
                     "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
                     "- name: \"5\"\n");
  const GpuDriverFiles f =
      FindGpuDriverFiles({{.index = 0, .uuid = "GPU-0", .minor = 0}}, o);
  EXPECT_EQ(f.source, GpuDriverFiles::Source::kNone);  // and no NVML
  EXPECT_EQ(DevicesOf(f), (std::map<std::string, std::string>{
                              {"/dev/nvidia0", host.dev() + "/nvidia0"},
                              {"/dev/nvidiactl", host.dev() + "/nvidiactl"},
                              {"/dev/nvidia-uvm", host.dev() + "/nvidia-uvm"},
                          }));
  EXPECT_THAT(f.mounts, IsEmpty());
  EXPECT_THAT(f.warnings,
              Contains(AllOf(HasSubstr(host.root() + "/bad-cdi/nvidia.yaml"),
                             HasSubstr("devices[0].containerEdits.mounts[0]"
                                       ".hostPath"))));
  EXPECT_THAT(f.warnings, Contains(HasSubstr("name none of the task's GPUs")));
}

// A driver directory as the NVIDIA installer leaves it, with what must not
// be taken from it.
class DriverDirHost {
 public:
  DriverDirHost() {
    const std::string d = dir();
    WriteDriverTestFile(d + "/libnvidia-ml.so.550.54.15", "nvml");
    fs::create_symlink("libnvidia-ml.so.550.54.15", d + "/libnvidia-ml.so.1");
    WriteDriverTestFile(d + "/libcuda.so.550.54.15", "cuda");
    fs::create_symlink("libcuda.so.550.54.15", d + "/libcuda.so.1");
    fs::create_symlink("libcuda.so.1", d + "/libcuda.so");
    // Not taken: another driver's leftover, a link out of the directory,
    // libraries that are not the driver's, a directory, a dangling link,
    // a backup.
    WriteDriverTestFile(d + "/libcuda.so.535.104.05", "old cuda");
    WriteDriverTestFile(tmp_.path() +
                            "/outside/libnvidia-ptxjitcompiler.so."
                            "550.54.15",
                        "outside");
    fs::create_symlink(
        tmp_.path() + "/outside/libnvidia-ptxjitcompiler.so.550.54.15",
        d + "/libnvidia-ptxjitcompiler.so.1");
    WriteDriverTestFile(d + "/libfoo.so.1");
    WriteDriverTestFile(d + "/libnvidia-glcore.so.550.54.15");
    fs::create_directories(d + "/libnvidia-cfg.so.1");
    fs::create_symlink("libnvidia-nvvm.so.550.54.15",
                       d + "/libnvidia-nvvm.so.4");
    WriteDriverTestFile(d + "/libcuda.so.1.bak");
    WriteDriverTestFile(smi(), "smi");
    ::chmod(smi().c_str(), 0755);
    WriteDriverTestFile(dev() + "/nvidia5");
    WriteDriverTestFile(dev() + "/nvidia0");
    WriteDriverTestFile(dev() + "/nvidiactl");
  }
  std::string dir() const { return tmp_.path() + "/usr/lib/x86_64-linux-gnu"; }
  std::string smi() const { return tmp_.path() + "/usr/bin/nvidia-smi"; }
  std::string dev() const { return tmp_.path() + "/dev"; }
  const std::string& root() const { return tmp_.path(); }

  GpuDriverOptions Options() const {
    GpuDriverOptions o;
    o.device_dir = dev();
    o.nvml_library = dir() + "/libnvidia-ml.so.1";
    o.nvidia_smi = smi();
    return o;
  }

 private:
  TempDir tmp_;
};

TEST(GpuDriverFilesTest, WithoutCdiTheFilesNextToNvml) {
  DriverDirHost host;
  GpuDriverOptions o = host.Options();
  o.cdi_dirs = {host.root() + "/no-cdi-here"};
  // NVML's index 0 is the device of minor 5.
  const GpuDriverFiles f =
      FindGpuDriverFiles({{.index = 0, .uuid = "GPU-0", .minor = 5}}, o);
  EXPECT_EQ(f.source, GpuDriverFiles::Source::kDriverDir);
  EXPECT_THAT(f.from, ElementsAre(host.dir()));
  EXPECT_EQ(DevicesOf(f), (std::map<std::string, std::string>{
                              {"/dev/nvidia5", host.dev() + "/nvidia5"},
                              {"/dev/nvidiactl", host.dev() + "/nvidiactl"},
                          }));
  const std::string in = kDriverLibraryDir;
  const std::string cuda = host.dir() + "/libcuda.so.550.54.15";
  const std::string nvml = host.dir() + "/libnvidia-ml.so.550.54.15";
  EXPECT_EQ(MountsOf(f),
            (std::map<std::string, std::string>{
                {in + "/libcuda.so", cuda},
                {in + "/libcuda.so.1", cuda},
                {in + "/libcuda.so.550.54.15", cuda},
                {in + "/libnvidia-ml.so.1", nvml},
                {in + "/libnvidia-ml.so.550.54.15", nvml},
                {std::string(kDriverBinaryDir) + "/nvidia-smi", host.smi()},
            }));
  for (const DriverMount& m : f.mounts) EXPECT_TRUE(m.readonly);
  EXPECT_THAT(f.library_dirs, ElementsAre(kDriverLibraryDir));
  EXPECT_THAT(f.binary_dirs, ElementsAre(kDriverBinaryDir));
  EXPECT_THAT(f.env, IsEmpty());
  EXPECT_THAT(
      f.warnings,
      Contains(HasSubstr("libnvidia-ptxjitcompiler.so.1 leads out of")));
  EXPECT_THAT(DescribeGpuDriverFiles(f), HasSubstr(host.dir()));
}

TEST(GpuDriverFilesTest, AnUnknownMinorIsTheIndexAndAMissingDeviceIsSaid) {
  DriverDirHost host;
  GpuDriverOptions o = host.Options();
  o.nvml_library.clear();  // emulated: no driver files at all
  const GpuDriverFiles f =
      FindGpuDriverFiles({{.index = 0, .uuid = "GPU-0", .minor = -1},
                          {.index = 1, .uuid = "GPU-1", .minor = 1}},
                         o);
  EXPECT_EQ(f.source, GpuDriverFiles::Source::kNone);
  EXPECT_EQ(DevicesOf(f), (std::map<std::string, std::string>{
                              {"/dev/nvidia0", host.dev() + "/nvidia0"},
                              {"/dev/nvidiactl", host.dev() + "/nvidiactl"},
                          }));
  EXPECT_THAT(f.mounts, IsEmpty());
  EXPECT_THAT(f.warnings, Contains(HasSubstr("minor number is not known")));
  EXPECT_THAT(f.warnings,
              Contains(HasSubstr(host.dev() + "/nvidia1 is missing")));
}

TEST(GpuDriverFilesTest, AMissingNvmlLibraryOrNvidiaSmiIsSaid) {
  DriverDirHost host;
  GpuDriverOptions o = host.Options();
  o.nvidia_smi = host.root() + "/nowhere/nvidia-smi";
  GpuDriverFiles f =
      FindGpuDriverFiles({{.index = 0, .uuid = "GPU-0", .minor = 0}}, o);
  EXPECT_EQ(f.source, GpuDriverFiles::Source::kDriverDir);
  EXPECT_EQ(MountsOf(f).count(std::string(kDriverBinaryDir) + "/nvidia-smi"),
            0u);
  EXPECT_THAT(f.binary_dirs, IsEmpty());
  EXPECT_THAT(f.warnings, Contains(HasSubstr("nvidia-smi not found")));

  o.nvml_library = host.root() + "/gone/libnvidia-ml.so.1";
  f = FindGpuDriverFiles({{.index = 0, .uuid = "GPU-0", .minor = 0}}, o);
  EXPECT_EQ(f.source, GpuDriverFiles::Source::kNone);
  EXPECT_THAT(f.mounts, IsEmpty());
  EXPECT_THAT(f.warnings, Contains(HasSubstr("gone/libnvidia-ml.so.1")));
}

}  // namespace
}  // namespace loom
