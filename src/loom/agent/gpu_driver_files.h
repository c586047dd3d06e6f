#pragma once

// What a container task needs of the host's GPU driver for its GPUs
// (docs/images.md, "GPU driver files"): the device nodes of those GPUs and
// of the driver's control devices, and the driver's user-space files
// (libcuda, libnvidia-ml, nvidia-smi, ...), which an image does not carry
// because they must match the host's kernel module.
//
// Where they come from:
//  - a CDI spec of kind nvidia.com/gpu (cdi_spec.h) naming the task's GPUs,
//    as nvidia-ctk writes it: the edits of the GPUs' devices and of their
//    specs. The spec's hooks are not run (the agent, root, would run the
//    programs a file names); what nvidia-ctk's hooks make is made here
//    instead: the library directories go on LD_LIBRARY_PATH, and the host's
//    links to each mounted library (its sonames, libcuda.so.1 ->
//    libcuda.so.580.95.05) are mounted beside it;
//  - otherwise the files next to the NVML library the agent loaded: the
//    libraries nvidia-container-cli injects for its utility, compute and
//    video capabilities, read-only under /usr/local/nvidia/lib64, and
//    nvidia-smi under /usr/local/nvidia/bin.
//
// A GPU's device is /dev/nvidia<minor> on the host and in the container
// alike: CUDA and NVML find GPUs by minor number, which need not be the NVML
// index.
//
// Reads the file system only (specs, directory listings, links); thread-safe.

#include <string>
#include <vector>

namespace loom {

// In the container: where the driver's files go without a CDI spec (NGC
// images already list these on LD_LIBRARY_PATH and PATH).
inline constexpr char kDriverLibraryDir[] = "/usr/local/nvidia/lib64";
inline constexpr char kDriverBinaryDir[] = "/usr/local/nvidia/bin";

// One GPU of the task, as the node knows it.
struct DriverGpu {
  int index = 0;     // NVML's
  std::string uuid;  // "GPU-..."
  int minor = -1;    // the device's minor number; -1: not known (the index)
};

struct GpuDriverOptions {
  // CDI spec directories, later ones winning (/etc/cdi, /var/run/cdi);
  // empty: no CDI.
  std::vector<std::string> cdi_dirs;
  // Where the host's nvidia* device files are: /dev, or an emulated node's
  // stand-ins.
  std::string device_dir = "/dev";
  // The NVML library the agent loaded (a path); "": none (emulated GPUs), so
  // nothing is taken from a driver directory.
  std::string nvml_library;
  // The host's nvidia-smi; "": the agent's PATH, else /usr/bin/nvidia-smi.
  std::string nvidia_smi;
  // Where the driver's /proc/driver/nvidia is found (under this root): MIG
  // capability devices (mig_devices.h). "/" on a host.
  std::string proc_root = "/";
};

struct DriverDevice {
  std::string host_path;
  std::string container_path;
};

struct DriverMount {
  std::string host_path;
  std::string container_path;
  bool readonly = true;
};

struct GpuDriverFiles {
  enum class Source { kNone, kCdi, kDriverDir };
  Source source = Source::kNone;
  // The CDI spec files used, or the driver's directory.
  std::vector<std::string> from;
  std::vector<DriverDevice> devices;  // each container path once
  std::vector<DriverMount> mounts;    // each container path once
  std::vector<std::string> env;       // "NAME=value", from CDI specs
  // In the container: to append to LD_LIBRARY_PATH and to PATH.
  std::vector<std::string> library_dirs;
  std::vector<std::string> binary_dirs;
  int hooks_not_run = 0;  // named by the specs used
  // What was skipped, and why (malformed specs, GPUs no spec names, files
  // that are missing): for the agent's log.
  std::vector<std::string> warnings;
};

// The files for `gpus` (nothing for none).
GpuDriverFiles FindGpuDriverFiles(const std::vector<DriverGpu>& gpus,
                                  const GpuDriverOptions& options);

// One line for the agent's log: "CDI spec /etc/cdi/nvidia.yaml: 4 devices,
// 37 mounts", "34 files next to /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
// ...", "none".
std::string DescribeGpuDriverFiles(const GpuDriverFiles& files);

}  // namespace loom
