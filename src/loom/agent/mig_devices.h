#pragma once

// The device files a MIG instance's processes need besides their GPU's
// (docs/agent.md "MIG"): the driver's capability devices of the instance's
// GPU instance and compute instances, /dev/nvidia-caps/nvidia-cap<N>. The
// driver publishes N in
// /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/access and
// .../gi<G>/ci<C>/access ("DeviceFileMinor: N"). A container gets only
// these and its GPU's device, so that it sees its slice and no other.

#include <string>
#include <vector>

namespace loom {

// The capability devices of GPU instance `gi` of the GPU whose device minor
// is `gpu_minor`, as paths under the device directory
// ("nvidia-caps/nvidia-cap21"): the GPU instance's first, then each compute
// instance's in the order of their ids. `proc_root` is "/" on a host (a
// test's directory otherwise). Empty when the driver publishes none (no MIG,
// an emulated GPU); unreadable or malformed files are skipped.
std::vector<std::string> MigCapabilityDevices(const std::string& proc_root,
                                              int gpu_minor, int gi);

}  // namespace loom
