#pragma once

// CDI specs (the Container Device Interface, cncf-tags/container-device-
// interface SPEC.md): the files a device vendor's tool writes under
// /etc/cdi and /var/run/cdi to say what a container needs of a device, as
// nvidia-ctk (`nvidia-ctk cdi generate`) writes them for kind
// `nvidia.com/gpu`. Only what the image step uses is read: `cdiVersion`,
// `kind`, `devices[]` (`name`, `containerEdits`) and the spec's own
// `containerEdits` (`env`, `deviceNodes`, `mounts`, `hooks`). Other fields
// (annotations, additionalGids, intelRdt, ...) are ignored. Hooks are read
// only to be counted: loom runs none (docs/images.md, "GPU driver files").

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

struct CdiDeviceNode {
  std::string path;       // in the container
  std::string host_path;  // on the host; the spec's `path` when it gives none
};

struct CdiMount {
  std::string host_path;
  std::string container_path;
  std::string type;                  // "" or "bind" for a bind mount
  std::vector<std::string> options;  // OCI mount options: "ro", "bind", ...
  bool readonly() const;             // unless the options say "rw"
};

struct CdiEdits {
  std::vector<std::string> env;  // "NAME=value"
  std::vector<CdiDeviceNode> device_nodes;
  std::vector<CdiMount> mounts;
  int hooks = 0;  // named in the spec, never run
};

struct CdiDevice {
  std::string name;  // "0", "GPU-<uuid>", "all", "0:1" (a MIG device), ...
  CdiEdits edits;
};

struct CdiSpec {
  std::string file;  // where it was read from
  std::string version;
  std::string kind;  // "nvidia.com/gpu"
  std::vector<CdiDevice> devices;
  // Applied when any device of this spec is: the control devices and the
  // driver's libraries, in nvidia-ctk's specs.
  CdiEdits edits;
};

// Parses the text of the spec file `file`: JSON when its name ends in
// ".json", else YAML. A spec is taken whole or not at all: anything
// malformed (a required field missing or of the wrong type, a relative path,
// an env entry without '=') is `InvalidArgument` naming the file and the
// field ("/etc/cdi/nvidia.yaml: devices[1].containerEdits.mounts[0]
// .hostPath: must be an absolute path").
absl::StatusOr<CdiSpec> ParseCdiSpec(std::string_view text,
                                     const std::string& file);

// The specs of kind `kind` in `dirs`: each directory's `*.yaml`, `*.yml` and
// `*.json` files in name order, directories in the order given (CDI puts
// /etc/cdi before /var/run/cdi; where two specs name the same device, the
// later one wins). A directory that does not exist is skipped; a file that
// cannot be read or parsed is skipped with a warning in `*warnings` that
// names it and the field at fault. Specs of other kinds are skipped quietly.
std::vector<CdiSpec> ReadCdiSpecs(const std::vector<std::string>& dirs,
                                  std::string_view kind,
                                  std::vector<std::string>* warnings);

}  // namespace loom
