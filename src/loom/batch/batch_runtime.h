#pragma once

// The programs of a batch job (docs/sbatch.md): `loom _batch ...`, which
// every task of a `loom sbatch` job runs (node 0 as the batch head, which
// runs the script; the others as step hosts), and `srun`, which the script
// calls. Each returns the process's exit code.

#include <string>
#include <vector>

namespace loom::batch {

// `loom _batch ARGS...` (argv without "loom" and "_batch").
int RunBatchTask(const std::vector<std::string>& args);
// `srun ARGS...` inside a batch script.
int RunSrun(const std::vector<std::string>& args);

}  // namespace loom::batch
