#include "loom/server/redact.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace {

constexpr char kHiddenJob[] = "(hidden: another user's job)";
constexpr char kHiddenDataset[] = "(hidden: another user's dataset)";

bool SeesAllJobs(const Principal& p) { return p.operator_or_admin(); }

std::string RedactStr(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool RedactIsLowerHex(char c) {
  return absl::ascii_isdigit(static_cast<unsigned char>(c)) ||
         (c >= 'a' && c <= 'f');
}

// Cuts every run of exactly 16 lower-case hex digits that stands alone (not
// inside a longer word) out of `text`: the form of a dataset version.
bool CutDatasetVersions(std::string& text) {
  bool changed = false;
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(text[i]))) {
      out.push_back(text[i++]);
      continue;
    }
    size_t end = i;
    while (end < text.size() &&
           absl::ascii_isalnum(static_cast<unsigned char>(text[end]))) {
      ++end;
    }
    const std::string_view word(text.data() + i, end - i);
    if (word.size() == 16 &&
        std::all_of(word.begin(), word.end(), RedactIsLowerHex)) {
      out += "(hidden)";
      changed = true;
    } else {
      out.append(word);
    }
    i = end;
  }
  if (changed) text = std::move(out);
  return changed;
}

}  // namespace

void RedactJobFor(const Principal& p, nlohmann::json& job) {
  if (p.admin() || job.value("user", std::string()) == p.user) return;
  if (!job.contains("spec") || !job["spec"].is_object()) return;
  nlohmann::json& spec = job["spec"];
  // What is hidden must not come back through a reason or an event (an
  // exec error quotes the argv, a launch error the working dir, a dataset's
  // listing its source): every string of the job outside its spec has those
  // values cut out.
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
    spec[field] = kHiddenJob;
  }
  // A dataset's source, unless the job named a dataset of the cluster (its
  // source is public); with it, the versions of the job's datasets (a
  // version is the key of a node's cached copy).
  bool hid_source = false;
  if (auto data = spec.find("data"); data != spec.end() && data->is_array()) {
    for (nlohmann::json& d : *data) {
      if (!d.is_object() || d.contains("dataset") || !d.contains("source")) {
        continue;
      }
      add(d["source"]);
      d["source"] = kHiddenJob;
      hid_source = true;
    }
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
      if (hid_source) changed = CutDatasetVersions(text) || changed;
      if (changed) v = text;
    } else if (v.is_array() || v.is_object()) {
      for (nlohmann::json& e : v) scrub(e);
    }
  };
  if (secrets.empty() && !hid_source) return;
  for (auto it = job.begin(); it != job.end(); ++it) {
    if (it.key() != "spec") scrub(it.value());
  }
}

bool HidesJobsFrom(const Principal& p, const PrivateData& private_data) {
  return private_data.jobs && !SeesAllJobs(p);
}

bool MaySeeJob(const Principal& p, const PrivateData& private_data,
               std::string_view user, std::string_view project) {
  if (!HidesJobsFrom(p, private_data)) return true;
  return (!p.user.empty() && p.user == user) ||
         p.InProject(std::string(project));
}

absl::Status ShowJobTo(const Principal& p, const PrivateData& private_data,
                       nlohmann::json& job) {
  if (!MaySeeJob(p, private_data, RedactStr(job, "user"),
                 RedactStr(job, "project"))) {
    return absl::PermissionDeniedError(absl::StrCat(
        "job ", job.value("id", int64_t{0}),
        " is neither yours nor of a project of yours (this cluster keeps "
        "other projects' jobs private: private_data lists jobs)"));
  }
  RedactJobFor(p, job);
  return absl::OkStatus();
}

void FilterJobsFor(const Principal& p, const PrivateData& private_data,
                   int64_t limit, nlohmann::json& rows) {
  if (!rows.is_array()) return;
  nlohmann::json kept = nlohmann::json::array();
  for (nlohmann::json& row : rows) {
    if (limit > 0 && static_cast<int64_t>(kept.size()) >= limit) break;
    if (!row.is_object() || !MaySeeJob(p, private_data, RedactStr(row, "user"),
                                       RedactStr(row, "project"))) {
      continue;
    }
    kept.push_back(std::move(row));
  }
  rows = std::move(kept);
}

void FilterUsageFor(const Principal& p, const PrivateData& private_data,
                    nlohmann::json& report) {
  if (!private_data.usage || SeesAllJobs(p) || !report.is_object()) return;
  auto rows = report.find("rows");
  if (rows == report.end() || !rows->is_array()) return;
  nlohmann::json kept = nlohmann::json::array();
  double gpu_seconds = 0, lost = 0;
  for (nlohmann::json& row : *rows) {
    if (!row.is_object()) continue;
    const bool own_user = row.contains("user") && !p.user.empty() &&
                          RedactStr(row, "user") == p.user;
    const bool own_project =
        row.contains("project") && p.InProject(RedactStr(row, "project"));
    if (!own_user && !own_project) continue;
    gpu_seconds += row.value("gpu_seconds", 0.0);
    lost += row.value("lost_gpu_seconds", 0.0);
    kept.push_back(std::move(row));
  }
  *rows = std::move(kept);
  report["total_gpu_seconds"] = gpu_seconds;
  report["total_lost_gpu_seconds"] = lost;
  report["goodput"] = gpu_seconds > 0 ? nlohmann::json(1.0 - lost / gpu_seconds)
                                      : nlohmann::json(nullptr);
}

void RedactDatasetsFor(const Principal& p,
                       const std::set<std::string>& own_sources,
                       nlohmann::json& datasets) {
  if (p.admin()) return;
  auto list = datasets.find("datasets");
  if (list == datasets.end() || !list->is_array()) return;
  for (nlohmann::json& d : *list) {
    if (!d.is_object() || !RedactStr(d, "name").empty() ||
        own_sources.contains(RedactStr(d, "source"))) {
      continue;
    }
    d["source"] = kHiddenDataset;
    if (auto use = d.find("use"); use != d.end() && use->is_object()) {
      use->erase("version");
      use->erase("nodes");
    }
  }
}

}  // namespace loom
