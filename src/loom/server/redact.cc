#include "loom/server/redact.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

namespace loom {

void RedactJobFor(const Principal& p, nlohmann::json& job) {
  if (p.admin() || job.value("user", std::string()) == p.user) return;
  if (!job.contains("spec") || !job["spec"].is_object()) return;
  nlohmann::json& spec = job["spec"];
  // What is hidden must not come back through a reason or an event (an
  // exec error quotes the argv, a launch error the working dir): every
  // string of the job outside its spec has those values cut out.
  std::vector<std::string> secrets;
  auto add = [&](const nlohmann::json& v) {
    if (v.is_string() && v.get<std::string>().size() >= 4) {
      secrets.push_back(v.get<std::string>());
    }
  };
  for (const char* field : {"command", "env", "working_dir"}) {
    if (!spec.contains(field)) continue;
    const nlohmann::json& v = spec[field];
    if (v.is_array() || v.is_object()) {
      for (const nlohmann::json& e : v) add(e);
    } else {
      add(v);
    }
    spec[field] = "(hidden: another user's job)";
  }
  // Longest first, so that a value containing another is cut whole.
  std::sort(secrets.begin(), secrets.end(),
            [](const std::string& a, const std::string& b) {
              return a.size() > b.size();
            });
  std::function<void(nlohmann::json&)> scrub = [&](nlohmann::json& v) {
    if (v.is_string()) {
      std::string text = v.get<std::string>();
      bool changed = false;
      for (const std::string& secret : secrets) {
        for (size_t at = text.find(secret); at != std::string::npos;
             at = text.find(secret, at)) {
          text.replace(at, secret.size(), "(hidden)");
          at += 8;
          changed = true;
        }
      }
      if (changed) v = text;
    } else if (v.is_array() || v.is_object()) {
      for (nlohmann::json& e : v) scrub(e);
    }
  };
  if (secrets.empty()) return;
  for (auto it = job.begin(); it != job.end(); ++it) {
    if (it.key() != "spec") scrub(it.value());
  }
}

}  // namespace loom
