#include "loom/core/dataset_spec.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "loom/common/digest.h"
#include "loom/core/container_spec.h"
#include "loom/core/dataset_spec_yaml.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace loom {
namespace {

absl::string_view DataAv(std::string_view s) { return {s.data(), s.size()}; }

bool DataRemoteNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
         c == '-' || c == '.' || c == '+' || c == '@' || c == ' ';
}

}  // namespace

absl::Status CheckDatasetName(std::string_view name) {
  const bool ok = !name.empty() && name.size() <= 63 &&
                  absl::ascii_isalnum(static_cast<unsigned char>(name[0])) &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    const auto u = static_cast<unsigned char>(c);
                    return absl::ascii_isdigit(u) || (c >= 'a' && c <= 'z') ||
                           c == '-' || c == '_' || c == '.';
                  });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "'", DataAv(name.substr(0, 80)),
      "' is not a dataset name (1 to 63 lower-case letters, digits, '-', '_' "
      "or '.', starting with a letter or digit)"));
}

absl::Status CheckDatasetSource(std::string_view source) {
  if (source.empty()) return absl::InvalidArgumentError("must not be empty");
  if (source.size() > kMaxDatasetSourceLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "is longer than ", kMaxDatasetSourceLength, " characters"));
  }
  for (char c : source) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return absl::InvalidArgumentError("must not contain control characters");
    }
  }
  if (source[0] == '/') {
    absl::StatusOr<std::string> p = NormalizeAbsolutePath(source);
    return p.ok() ? absl::OkStatus() : p.status();
  }
  if (source[0] == ':') {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", DataAv(source),
        "' is an on-the-fly remote; name a remote of the cluster's rclone "
        "config instead (credentials never go in job specs)"));
  }
  const size_t colon = source.find(':');
  if (colon == std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", DataAv(source),
        "' is neither REMOTE:PATH (a remote of the cluster's rclone config) "
        "nor an absolute path"));
  }
  const std::string_view remote = source.substr(0, colon);
  if (remote.find(',') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", DataAv(source),
        "' sets backend options in a connection string; the cluster's rclone "
        "config sets them (credentials never go in job specs)"));
  }
  if (remote[0] == '-' || remote[0] == ' ' || remote.back() == ' ' ||
      !std::all_of(remote.begin(), remote.end(), DataRemoteNameChar)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", DataAv(remote),
                     "' is not a remote name (letters, digits, '_', '-', "
                     "'.', '+', '@', spaces inside)"));
  }
  return absl::OkStatus();
}

std::string DatasetVersion(std::string_view source,
                           std::vector<DatasetEntry> entries) {
  std::sort(entries.begin(), entries.end(),
            [](const DatasetEntry& a, const DatasetEntry& b) {
              return a.path < b.path;
            });
  std::string text(source);
  text.push_back('\0');
  text.push_back('\n');
  for (const DatasetEntry& e : entries) {
    // NUL separates fields: no field can hold one.
    text += e.path;
    text.push_back('\0');
    absl::StrAppend(&text, e.size);
    text.push_back('\0');
    text += e.hash.empty() ? e.modtime : e.hash;
    text.push_back('\n');
  }
  return Sha256Hex(text).substr(0, 16);
}

std::string RcloneErrorText(std::string_view line) {
  // "YYYY/MM/DD HH:MM:SS " then an optional level ("ERROR : ", "NOTICE: ").
  auto digits = [&](size_t at, size_t n) {
    if (line.size() < at + n) return false;
    for (size_t i = at; i < at + n; ++i) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(line[i]))) {
        return false;
      }
    }
    return true;
  };
  if (digits(0, 4) && line.size() > 20 && line[4] == '/' && line[7] == '/' &&
      line[10] == ' ' && line[13] == ':' && line[16] == ':' &&
      line[19] == ' ') {
    line.remove_prefix(20);
    for (std::string_view level : {"ERROR : ", "NOTICE: ", "INFO  : "}) {
      if (line.substr(0, level.size()) == level)
        line.remove_prefix(level.size());
    }
  }
  return std::string(line);
}

bool IsDatasetVersion(std::string_view version) {
  return version.size() == 16 &&
         std::all_of(version.begin(), version.end(), [](char c) {
           return absl::ascii_isdigit(static_cast<unsigned char>(c)) ||
                  (c >= 'a' && c <= 'f');
         });
}

absl::StatusOr<std::vector<DatasetEntry>> ParseRcloneLsjson(
    std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError("listing is not a JSON array");
  }
  std::vector<DatasetEntry> out;
  for (const nlohmann::json& e : j) {
    if (!e.is_object()) {
      return absl::InvalidArgumentError("listing entry is not an object");
    }
    if (e.value("IsDir", false)) continue;
    auto path = e.find("Path");
    auto size = e.find("Size");
    if (path == e.end() || !path->is_string() || size == e.end() ||
        !size->is_number_integer()) {
      return absl::InvalidArgumentError(
          "listing entry without a Path or a Size");
    }
    DatasetEntry d;
    d.path = path->get<std::string>();
    d.size = size->get<int64_t>();
    if (auto m = e.find("ModTime"); m != e.end() && m->is_string()) {
      d.modtime = m->get<std::string>();
    }
    if (auto h = e.find("Hashes"); h != e.end() && h->is_object()) {
      // nlohmann's object keeps keys sorted: the first is the same each time.
      for (auto& [name, value] : h->items()) {
        if (value.is_string() && !value.get<std::string>().empty()) {
          d.hash = absl::StrCat(name, ":", value.get<std::string>());
          break;
        }
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

namespace internal {
namespace {

using yaml::ChildPath;
using yaml::ElementPath;
using yaml::Field;
using yaml::KindOf;
using yaml::MapNode;

absl::StatusOr<std::string> ReadDataText(const yaml::Reader& r,
                                         const YAML::Node& node,
                                         absl::string_view path) {
  if (!node.IsScalar()) {
    return r.Error(node, path,
                   absl::StrCat("must be a string, got ", KindOf(node)));
  }
  std::string s = yaml::ScalarText(node);
  if (s.find('\0') != std::string::npos) {
    return r.Error(node, path, "must not contain NUL characters");
  }
  return s;
}

constexpr std::string_view kDataRuntimeDirs[] = {"/proc", "/sys", "/dev"};

}  // namespace

absl::StatusOr<std::vector<DatasetSpec>> ParseDataField(const yaml::Reader& r,
                                                        const Field& field) {
  const std::string& path = field.key;
  absl::StatusOr<std::vector<YAML::Node>> items =
      r.ReadList(field.value, path, /*allow_empty=*/true);
  if (!items.ok()) return items.status();
  if (items->size() > kMaxJobDatasets) {
    return r.Error(field.value, path,
                   absl::StrCat("has ", items->size(), " datasets; at most ",
                                kMaxJobDatasets, " are allowed"));
  }
  std::vector<DatasetSpec> out;
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& item = (*items)[i];
    const std::string item_path = ElementPath(path, i);
    absl::StatusOr<MapNode> map =
        r.ReadMap(item, item_path, {"source", "dataset", "mount"});
    if (!map.ok()) return map.status();
    DatasetSpec d;
    const Field* source = map->Find("source");
    const Field* name = map->Find("dataset");
    if (source == nullptr && name == nullptr) {
      return r.Error(item, item_path,
                     "needs a source (REMOTE:PATH or an absolute path) or a "
                     "dataset (a name from `loom dataset list`)");
    }
    // The name and the source, each read and checked when given.
    for (auto [field, key, check, dest] :
         {std::tuple{name, "dataset", &CheckDatasetName, &d.name},
          std::tuple{source, "source", &CheckDatasetSource, &d.source}}) {
      if (field == nullptr) continue;
      const std::string field_path = ChildPath(item_path, key);
      absl::StatusOr<std::string> text =
          ReadDataText(r, field->value, field_path);
      if (!text.ok()) return text.status();
      if (absl::Status st = (*check)(*text); !st.ok()) {
        return r.Error(field->value, field_path, st.message());
      }
      *dest = *std::move(text);
    }
    // A named dataset's mount defaults to /data/NAME.
    const Field* mount = map->Find("mount");
    if (mount == nullptr && d.name.empty()) {
      absl::StatusOr<const Field*> required = r.Require(*map, "mount");
      if (!required.ok()) return required.status();
    }
    const std::string mount_path = ChildPath(item_path, "mount");
    const YAML::Node& mount_node = mount != nullptr ? mount->value : item;
    std::string mtext = "/data/" + d.name;
    if (mount != nullptr) {
      absl::StatusOr<std::string> t = ReadDataText(r, mount->value, mount_path);
      if (!t.ok()) return t.status();
      mtext = *std::move(t);
    }
    absl::StatusOr<std::string> m = NormalizeAbsolutePath(mtext);
    if (!m.ok()) return r.Error(mount_node, mount_path, m.status().message());
    if (*m == "/") {
      return r.Error(mount_node, mount_path, "must not be '/'");
    }
    for (std::string_view dir : kDataRuntimeDirs) {
      if (PathIsUnder(*m, dir)) {
        return r.Error(mount_node, mount_path,
                       absl::StrCat("'", *m, "' is under ", DataAv(dir),
                                    ", which the runtime sets up itself"));
      }
    }
    for (size_t k = 0; k < out.size(); ++k) {
      if (PathIsUnder(*m, out[k].mount) || PathIsUnder(out[k].mount, *m)) {
        return r.Error(
            mount_node, mount_path,
            absl::StrCat("'", *m, "' overlaps the mount of ",
                         ElementPath(path, k), " ('", out[k].mount, "')"));
      }
    }
    d.mount = *std::move(m);
    out.push_back(std::move(d));
  }
  return out;
}

nlohmann::ordered_json DatasetSpecsJson(const std::vector<DatasetSpec>& data) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const DatasetSpec& d : data) {
    nlohmann::ordered_json item;
    if (!d.name.empty()) item["dataset"] = d.name;
    if (!d.source.empty()) item["source"] = d.source;
    item["mount"] = d.mount;
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace internal
}  // namespace loom
