#pragma once

namespace loom {

// loom's version: `loom --version`, and the "loom" of the software stack an
// agent reports (docs/agent.md). Keep in step with `project(loom VERSION)`
// in the top CMakeLists.txt.
inline constexpr char kLoomVersion[] = "0.1.0";

}  // namespace loom
