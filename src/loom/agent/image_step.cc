#include "loom/agent/image_step.h"

#include <grp.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loom/agent/gpu_driver_files.h"
#include "loom/agent/json_values.h"
#include "loom/agent/mig_devices.h"
#include "loom/agent/mount_source.h"
#include "loom/agent/oci_bundle.h"
#include "loom/common/fnv.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;

constexpr char kDefaultPath[] =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// FNV-1a, 64 bits, as 16 hex digits: a short name unique per host path.
std::string ShortHash(std::string_view text) {
  return absl::StrCat(absl::Hex(Fnv1a64(text), absl::kZeroPad16));
}

// Env, Entrypoint and WorkingDir of the image's config (OCI image spec,
// `config` object).
absl::Status ReadImageConfig(const std::string& path, ContainerLaunch& out) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return absl::DataLossError(absl::StrCat("cannot read ", path));
  json doc = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    return absl::DataLossError(absl::StrCat(path, " is not a JSON object"));
  }
  auto config = doc.find("config");
  if (config == doc.end() || !config->is_object()) return absl::OkStatus();
  auto strings = [&](const char* key, std::vector<std::string>& dst) {
    auto it = config->find(key);
    if (it == config->end() || !it->is_array()) return;
    for (const json& v : *it) {
      if (v.is_string()) dst.push_back(v.get<std::string>());
    }
  };
  strings("Env", out.env);
  strings("Entrypoint", out.entrypoint);
  if (auto wd = config->find("WorkingDir");
      wd != config->end() && wd->is_string()) {
    out.working_dir = wd->get<std::string>();
  }
  return absl::OkStatus();
}

// What the container gets for the host's device file `host` at `inside`: a
// device node for a real device, a bind mount for a stand-in (an emulated
// GPU's regular file), nothing when it is missing.
void AddDevice(const std::string& host, const std::string& inside,
               OciConfig& config) {
  struct stat st;
  if (::stat(host.c_str(), &st) != 0) return;
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
    config.devices.push_back({inside, S_ISCHR(st.st_mode) ? 'c' : 'b',
                              static_cast<int64_t>(major(st.st_rdev)),
                              static_cast<int64_t>(minor(st.st_rdev)),
                              static_cast<uint32_t>(st.st_mode & 0777)});
  } else if (S_ISREG(st.st_mode)) {
    config.binds.push_back({host, inside, false});
  }
}

// The task's GPUs as the node knows them (UUIDs, minor numbers).
std::vector<DriverGpu> TaskDriverGpus(const AgentNode& node,
                                      const std::vector<int>& gpus) {
  std::vector<DriverGpu> out;
  for (int g : gpus) {
    DriverGpu gpu;
    gpu.index = g;
    for (const GpuDevice& d : node.gpus) {
      if (d.index == g) {
        gpu.uuid = d.uuid;
        gpu.minor = d.minor;
      }
    }
    out.push_back(std::move(gpu));
  }
  return out;
}

// `dirs` at the end of the ':'-separated list `name` of `env`, each unless
// it is there already.
void AppendToPathList(std::map<std::string, std::string>& env,
                      const std::string& name,
                      const std::vector<std::string>& dirs) {
  for (const std::string& dir : dirs) {
    std::string& list = env[name];
    const std::vector<std::string> parts = absl::StrSplit(list, ':');
    if (std::find(parts.begin(), parts.end(), dir) != parts.end()) continue;
    list = list.empty() ? dir : absl::StrCat(list, ":", dir);
  }
}

// The supplementary groups of `uid` (with primary group `gid`).
std::vector<gid_t> GroupsOf(const LaunchContext& ctx, gid_t gid) {
  if (!ctx.user) return {};
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (::getgrouplist(ctx.user->name.c_str(), gid, groups.data(), &n) < 0) {
    groups.resize(static_cast<size_t>(n));
    if (::getgrouplist(ctx.user->name.c_str(), gid, groups.data(), &n) < 0) {
      return {};
    }
  }
  groups.resize(static_cast<size_t>(n));
  std::erase(groups, gid);
  return groups;
}

bool SafeInOverlayOptions(const std::string& path) {
  return path.find_first_of(",:\\") == std::string::npos;
}

// Keeps `handle` for the launch (given back with the last holder) and
// reads the image's config.
absl::Status HoldImage(LaunchContext& ctx, image::ImageHandle handle,
                       std::string* field) {
  const ContainerRequest& c = *ctx.request.container;
  auto launch = std::make_shared<ContainerLaunch>(ctx.node.images.get(),
                                                  std::move(handle));
  if (absl::Status s = ReadImageConfig(launch->image.config, *launch);
      !s.ok()) {
    return FieldError(
        field, "container.image",
        absl::StrCat("image ", c.image_ref, " on node ", ctx.node.name,
                     ": its config: ", Str(s.message())));
  }
  ctx.container = std::move(launch);
  return absl::OkStatus();
}

class ImageStep : public LaunchStep {
 public:
  explicit ImageStep(ImageStepOptions options) : options_(std::move(options)) {}
  std::string_view name() const override { return "image"; }

  absl::Status Prepare(LaunchContext& ctx, std::string* field) const override {
    if (!ctx.request.container) return absl::OkStatus();
    const ContainerRequest& c = *ctx.request.container;
    const AgentNode& node = ctx.node;
    if (node.images == nullptr) {
      return FieldError(field, "container",
                        absl::StrCat("node ", node.name,
                                     " runs no container tasks (its agent "
                                     "has no image store)"));
    }
    if (::geteuid() != 0) {
      return FieldError(field, "container",
                        absl::StrCat("node ", node.name,
                                     ": container tasks need an agent "
                                     "running as root (runc)"));
    }
    absl::StatusOr<image::ImageRef> ref = image::ParseImageRef(c.image);
    if (!ref.ok()) {
      return FieldError(field, "container.image", Str(ref.status().message()));
    }
    if (ref->digest.empty()) {
      return FieldError(field, "container.image",
                        absl::StrCat(c.image,
                                     " has no digest: the server pins one "
                                     "at submit"));
    }
    if (!SafeInOverlayOptions(node.root)) {
      return FieldError(
          field, "container",
          absl::StrCat("node ", node.name, ": its directory ", node.root,
                       " has a ',', ':' or '\\', which an "
                       "overlay mount cannot name"));
    }
    // The server checked each source against the cluster's allowed
    // directories, lexically: each is opened now as the task's user would
    // reach it, without following a symbolic link (which could lead out of
    // them, or into what the user may not read), and what was opened is
    // what the processes bind, whatever the path names after the pull.
    if (!c.mounts.empty()) {
      std::optional<PathUser> user;
      if (ctx.user) {
        user = PathUser{ctx.user->name, ctx.user->uid, ctx.user->gid,
                        GroupsOf(ctx, ctx.user->gid)};
      }
      auto held = std::make_shared<ContainerMountTrees>();
      held->trees.resize(
          static_cast<size_t>(std::max(ctx.request.processes, 1)));
      for (size_t i = 0; i < c.mounts.size(); ++i) {
        const std::string& source = c.mounts[i].source;
        const std::string at = absl::StrCat("container.mounts[", i, "].source");
        absl::StatusOr<MountSource> opened = OpenMountSource(source, user);
        if (!opened.ok()) {
          return FieldError(field, at,
                            absl::StrCat("on node ", node.name, ": ",
                                         Str(opened.status().message())));
        }
        for (std::vector<OwnedFd>& trees : held->trees) {
          absl::StatusOr<OwnedFd> tree = CloneMountTree(*opened, source);
          if (!tree.ok()) {
            return FieldError(field, at,
                              absl::StrCat("on node ", node.name, ": ",
                                           Str(tree.status().message())));
          }
          trees.push_back(*std::move(tree));
        }
      }
      ctx.container_mounts = std::move(held);
    }
    // Held already (another task's, or cached): no pull, the launch goes
    // on at once. Otherwise Fetch pulls it, in the background.
    if (absl::StatusOr<image::ImageHandle> held =
            node.images->Acquire(ref->digest);
        held.ok()) {
      return HoldImage(ctx, *std::move(held), field);
    }
    return absl::OkStatus();
  }

  bool NeedsFetch(const LaunchContext& ctx) const override {
    return ctx.request.container.has_value() && ctx.container == nullptr;
  }

  absl::Status Fetch(LaunchContext& ctx, ImagePullMeter& meter) const override {
    const ContainerRequest& c = *ctx.request.container;
    const AgentNode& node = ctx.node;
    absl::StatusOr<image::ImageRef> ref = image::ParseImageRef(c.image);
    if (!ref.ok()) return ref.status();  // Prepare checked it
    absl::StatusOr<image::ImageHandle> handle =
        node.images->Ensure(*ref, [&meter](const image::PullProgress& p) {
          meter.phase.store(static_cast<int>(p.phase));
          meter.bytes_done.store(p.bytes_done);
          meter.bytes_total.store(p.bytes_total);
        });
    if (!handle.ok()) {
      const std::string why =
          absl::StrCat("pulling image ", c.image_ref, " on node ", node.name,
                       ": ", Str(handle.status().message()));
      ctx.log("warn", node.name,
              absl::StrCat("launch of task ", ctx.request.task_id,
                           " failed: ", why));
      return absl::InvalidArgumentError(why);
    }
    std::string field;
    return HoldImage(ctx, *std::move(handle), &field);
  }

  void Apply(const LaunchContext& ctx, const TaskProcess& proc, int k,
             TaskSpec& spec) const override {
    if (!ctx.container) return;
    const ContainerRequest& c = *ctx.request.container;
    const ContainerLaunch& img = *ctx.container;
    const AgentNode& node = ctx.node;
    const std::string bundle = BundleDir(node, proc.launcher_id);

    OciConfig oc;
    if (!c.no_entrypoint) {
      oc.args = c.entrypoint.empty() ? img.entrypoint : c.entrypoint;
    }
    oc.args.insert(oc.args.end(), spec.argv.begin(), spec.argv.end());
    // The GPUs' devices and the host driver's files (gpu_driver_files.h).
    const std::vector<int>& gpus = ctx.request.gpus;
    GpuDriverOptions driver_options = options_.gpu_driver;
    driver_options.device_dir = node.device_dir;
    const GpuDriverFiles driver =
        FindGpuDriverFiles(TaskDriverGpus(node, gpus), driver_options);
    for (const std::string& w : driver.warnings) {
      ctx.log("warn", node.name,
              absl::StrCat("task ", ctx.request.task_id,
                           ": GPU driver files: ", w));
    }
    // The image's environment, then the driver's (a CDI spec's), under the
    // task's (which has the env contract). GPUs: CUDA numbers the devices
    // it can open from 0; NVIDIA_VISIBLE_DEVICES names them as the host
    // does; the driver's library and program directories go last on
    // LD_LIBRARY_PATH and PATH.
    std::map<std::string, std::string> env;
    for (const std::vector<std::string>* list : {&img.env, &driver.env}) {
      for (const std::string& kv : *list) {
        const size_t eq = kv.find('=');
        if (eq != std::string::npos && eq > 0) {
          env[kv.substr(0, eq)] = kv.substr(eq + 1);
        }
      }
    }
    for (const auto& [k, v] : spec.env) env[k] = v;
    // Docker's default for an image that sets none.
    env.try_emplace("PATH", kDefaultPath);
    std::vector<int> local;
    for (size_t i = 0; i < gpus.size(); ++i) {
      local.push_back(static_cast<int>(i));
    }
    // A MIG task sees its instance only (mig_step.h), by its UUID.
    const bool mig = !ctx.mig_uuid.empty() && gpus.size() == 1;
    env["CUDA_VISIBLE_DEVICES"] =
        mig ? ctx.mig_uuid : absl::StrJoin(local, ",");
    env["NVIDIA_VISIBLE_DEVICES"] = mig            ? ctx.mig_uuid
                                    : gpus.empty() ? "void"
                                                   : absl::StrJoin(gpus, ",");
    AppendToPathList(env, "LD_LIBRARY_PATH", driver.library_dirs);
    AppendToPathList(env, "PATH", driver.binary_dirs);
    for (const auto& [k, v] : env) oc.env.push_back(absl::StrCat(k, "=", v));
    oc.cwd = !c.workdir.empty()         ? c.workdir
             : !img.working_dir.empty() ? img.working_dir
                                        : "/";
    oc.uid = spec.uid.value_or(::geteuid());
    oc.gid = spec.gid.value_or(::getegid());
    oc.additional_gids = GroupsOf(ctx, oc.gid);
    oc.rootfs = absl::StrCat(bundle, "/rootfs");
    oc.readonly_root = !c.writable;
    oc.shm_bytes = c.shm_size_bytes > 0 ? c.shm_size_bytes
                   : ctx.request.limits.memory_bytes
                       ? *ctx.request.limits.memory_bytes
                       : 0;
    // In the task's v2 group where it has one (killing the group kills the
    // container); else a name of its own, unique on the host.
    oc.cgroups_path =
        node.groups != nullptr
            ? absl::StrCat(node.groups->PathInHierarchy(proc.launcher_id),
                           "/container")
            : absl::StrCat("/loom-", ShortHash(bundle));
    oc.memory_limit_bytes = ctx.request.limits.memory_bytes.value_or(0);
    oc.cpu_millis = ctx.request.limits.cpu_millis.value_or(0);

    // The driver's files first: a job's mount over one of their directories
    // hides them rather than getting their mount points.
    for (const DriverMount& m : driver.mounts) {
      oc.binds.push_back({m.host_path, m.container_path, m.readonly});
    }
    for (const DriverDevice& d : driver.devices) {
      AddDevice(d.host_path, d.container_path, oc);
    }
    // The task's checkpoint directory, at the same path inside.
    TaskSandbox sandbox;
    std::vector<std::string> own_dirs = spec.create_dirs;
    if (auto it = spec.env.find("LOOM_CHECKPOINT_DIR");
        it != spec.env.end() && !it->second.empty() && it->second[0] == '/') {
      if (std::find(own_dirs.begin(), own_dirs.end(), it->second) ==
          own_dirs.end()) {
        own_dirs.push_back(it->second);
      }
    }
    for (const std::string& dir : own_dirs) {
      if (dir.empty() || dir[0] != '/') continue;
      sandbox.dirs.push_back({dir, oc.uid, oc.gid, false});
      oc.binds.push_back({dir, dir, false});
    }
    // The job's mounts: the trees held since Prepare, attached in the
    // bundle by the process (in its namespace), bound from there by runc.
    // One missing (it cannot be) fails the launch: the sandbox refuses a
    // mount without a tree or a type.
    std::vector<TaskMount> source_mounts;
    for (size_t i = 0; i < c.mounts.size(); ++i) {
      TaskMount at;
      at.target = absl::StrCat(bundle, "/mounts/", i);
      const ContainerMountTrees* held = ctx.container_mounts.get();
      if (held != nullptr && k >= 0 &&
          static_cast<size_t>(k) < held->trees.size() &&
          i < held->trees[k].size()) {
        at.tree_fd = held->trees[k][i].get();
      }
      oc.binds.push_back(
          {at.target, c.mounts[i].destination, c.mounts[i].readonly});
      source_mounts.push_back(std::move(at));
    }
    for (const auto& [dir, mount] : ctx.data_binds) {  // data_step.h
      oc.binds.push_back({dir, mount, true});
    }
    // The host's network, so its names too.
    for (const char* file : {"/etc/hosts", "/etc/resolv.conf"}) {
      if (::access(file, R_OK) == 0) oc.binds.push_back({file, file, true});
    }
    // A MIG task's capability devices of its GPU and compute instances
    // (mig_devices.h): with its GPU's device, all CUDA needs for the slice.
    if (mig) {
      int minor = gpus[0];
      for (const GpuDevice& d : node.gpus) {
        if (d.index == gpus[0] && d.minor >= 0) minor = d.minor;
      }
      for (const std::string& device : MigCapabilityDevices(
               options_.gpu_driver.proc_root, minor, ctx.mig_gi)) {
        AddDevice(absl::StrCat(node.device_dir, "/", device),
                  absl::StrCat("/dev/", device), oc);
      }
    }
    // The RDMA devices of the task's NICs (nic_step.h) the node has.
    for (const std::string& device : ctx.nic_devices) {
      AddDevice(absl::StrCat(node.device_dir, "/", device),
                absl::StrCat("/dev/", device), oc);
    }

    sandbox.files.emplace_back(absl::StrCat(bundle, "/config.json"),
                               OciConfigJson(oc));
    sandbox.files.emplace_back(absl::StrCat(bundle, "/image"),
                               img.image.digest);
    sandbox.dirs.push_back(
        {absl::StrCat(bundle, "/upper"), std::nullopt, std::nullopt, true});
    sandbox.dirs.push_back(
        {absl::StrCat(bundle, "/work"), std::nullopt, std::nullopt, true});
    TaskMount overlay;
    overlay.source = "overlay";
    overlay.target = oc.rootfs;
    overlay.fstype = "overlay";
    overlay.flags = MS_NOSUID | MS_NODEV;
    overlay.data =
        absl::StrCat("lowerdir=", img.image.rootfs, ",upperdir=", bundle,
                     "/upper,workdir=", bundle, "/work");
    sandbox.mounts.push_back(std::move(overlay));
    for (TaskMount& m : source_mounts) sandbox.mounts.push_back(std::move(m));

    spec.argv = {options_.runc,   "--root",   absl::StrCat(node.root, "/runc"),
                 "run",           "--bundle", bundle,
                 proc.launcher_id};
    spec.env.clear();  // runc's own: the launcher adds PATH, HOME, LANG
    spec.uid.reset();  // runc switches to the user inside
    spec.gid.reset();
    spec.working_dir = bundle;
    spec.create_dirs.clear();
    spec.sandbox = std::move(sandbox);
  }

 private:
  const ImageStepOptions options_;
};

}  // namespace

std::string BundleDir(const AgentNode& node, const std::string& launcher_id) {
  return absl::StrCat(node.root, "/containers/", launcher_id);
}

std::shared_ptr<const ContainerLaunch> ReadoptContainer(const AgentNode& node,
                                                        const TaskUnit& unit) {
  for (const TaskProcess& p : unit.procs) {
    std::ifstream in(absl::StrCat(BundleDir(node, p.launcher_id), "/image"));
    std::string digest;
    if (!std::getline(in, digest) || digest.empty()) continue;
    if (node.images != nullptr) {
      absl::StatusOr<image::ImageHandle> held = node.images->Acquire(digest);
      if (held.ok()) {
        return std::make_shared<ContainerLaunch>(node.images.get(),
                                                 *std::move(held));
      }
    }
    // Not held any more: nothing to give back, the bundle still goes.
    image::ImageHandle gone;
    gone.digest = digest;
    return std::make_shared<ContainerLaunch>(nullptr, std::move(gone));
  }
  return nullptr;
}

std::unique_ptr<const LaunchStep> MakeImageStep(ImageStepOptions options) {
  return std::make_unique<ImageStep>(std::move(options));
}

}  // namespace loom
