#pragma once

#include "loom/batch/batch_env.h"

namespace loom::batch {

// The step host's loop (batch_host.cc); returns the process's exit code.
int RunStepHost(const Env& task_env);

}  // namespace loom::batch
