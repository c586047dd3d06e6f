#pragma once

// A job in a container image at the server (docs/images.md): the checks of
// `POST /v1/jobs` that need the image library or the registry, and the
// `container` object of the launch request an agent gets.

#include "absl/status/status.h"
#include "loom/core/cluster.h"
#include "loom/core/container_spec.h"
#include "loom/core/job_spec.h"
#include "loom/server/image_resolver.h"
#include "nlohmann/json.hpp"

namespace loom {

// The checks that need no registry, for a spec with a `container`: the
// reference in the grammar of `image::ParseImageRef`, its registry against
// `cluster.containers.allowed_registries` (`CheckContainerRegistry`), then
// the mounts against `cluster.containers.allowed_mounts`
// (`CheckContainerMounts`). InvalidArgument naming the field
// ("container.image: ...", "container.mounts[1]: ..."). OK for a spec
// without a container.
absl::Status CheckContainer(const Cluster& cluster, const JobSpec& spec);

// `CheckContainer`, then one request through `resolver` for the digest the
// reference names now, recorded as `spec->container->image_digest` (a
// value the spec brought is replaced). The registry's errors become:
// NotFound -> InvalidArgument "container.image: ... not found ...";
// Unavailable -> Unavailable (503: retry later), one text for every
// unreachable registry, without the resolver's detail (which would tell an
// open port from a closed one); PermissionDenied ->
// InvalidArgument saying the registry wants credentials loom does not have;
// anything else -> InvalidArgument naming `container.image`. `resolver`
// null: FailedPrecondition (the server was started without one). Does
// nothing for a spec without a container. Makes network I/O: call it
// without holding any lock.
absl::Status ResolveContainer(const Cluster& cluster, ImageResolver* resolver,
                              JobSpec* spec);

// The `container` object of a launch request (docs/agent-tasks.md):
// {"image": "<registry>/<repository>@<digest>" (pinned, the tag dropped),
//  "image_ref": the reference as written, "mounts": [{"source",
//  "destination", "readonly"}], "workdir", "entrypoint": [...], "writable",
//  "shm_size": bytes (0: the agent's default)}. "entrypoint" is [] both when
// the spec gives none (the image's Entrypoint is used) and for
// `entrypoint: []`; the latter adds "no_entrypoint": true.
nlohmann::json ContainerLaunchJson(const ContainerSpec& spec);

}  // namespace loom
