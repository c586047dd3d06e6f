#pragma once

// The launch step of a task that runs in a container image (docs/images.md,
// "Running"): it opens and checks the job's mount sources (`Prepare`) and
// pulls the image into the node's store once per node (`Prepare`, or
// `Fetch` when it is not held), then turns each process's spec into a runc
// bundle and a `runc run` of it (`Apply`): the spec's program, environment,
// user and directories go into the bundle's config.json; the task's program
// becomes runc, run as root, in a mount namespace of its own where the
// image's root is mounted as an overlay and the mounts' sources attached
// (`TaskSandbox`). Last of the steps: it takes what the others decided.

#include <memory>
#include <string>
#include <vector>

#include "loom/agent/gpu_driver_files.h"
#include "loom/agent/launch_steps.h"
#include "loom/agent/mount_source.h"
#include "loom/image/image_store.h"

namespace loom {

// An image held for a task: the store's use of it is given back when the
// last holder (the launch, then the task's unit) lets go.
struct ContainerLaunch {
  ContainerLaunch(image::ImageStore* store, image::ImageHandle handle)
      : store(store), image(std::move(handle)) {}
  ContainerLaunch(const ContainerLaunch&) = delete;
  ContainerLaunch& operator=(const ContainerLaunch&) = delete;
  ~ContainerLaunch() {
    if (store != nullptr) store->Release(image.digest);
  }

  image::ImageStore* const store;
  const image::ImageHandle image;
  // From the image's config.
  std::vector<std::string> env;  // "NAME=value"
  std::vector<std::string> entrypoint;
  std::string working_dir;
};

// The sources of a container task's `mounts`, opened once at Prepare as
// the task's user would reach them, never through a symbolic link
// (`OpenMountSource`), each as detached mount trees (`CloneMountTree`):
// `trees[k][i]` is mount i's for process k, which that process attaches at
// `<bundle>/mounts/<i>` in its own mount namespace, and runc binds from
// there. What is bound is what was checked, whatever the path names by the
// time the image is pulled.
struct ContainerMountTrees {
  std::vector<std::vector<OwnedFd>> trees;
};

// `<node>/containers/<launcher id>`: a process's bundle (config.json, the
// overlay's rootfs, upper and work directories).
std::string BundleDir(const AgentNode& node, const std::string& launcher_id);

// For a task a restarted agent re-adopts: the image its bundle names (the
// `image` file beside config.json), held again so that it is not evicted
// while the task runs, and so that the bundle goes with the task. Null for a
// task that is not a container's.
std::shared_ptr<const ContainerLaunch> ReadoptContainer(const AgentNode& node,
                                                        const TaskUnit& unit);

struct ImageStepOptions {
  std::string runc = "runc";  // found on the agent's PATH unless absolute
  // Where a task's GPU driver files come from (gpu_driver_files.h); the
  // device directory is each node's own (`AgentNode::device_dir`).
  GpuDriverOptions gpu_driver;
};

std::unique_ptr<const LaunchStep> MakeImageStep(ImageStepOptions options);

}  // namespace loom
