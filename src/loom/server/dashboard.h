#pragma once

// The web dashboard `loom server` serves at `/` (docs/dashboard.md): one page
// of plain JavaScript over the REST API, built into the binary from
// src/loom/server/dashboard.html.

#include <string_view>

namespace loom {

std::string_view DashboardHtml();

}  // namespace loom
