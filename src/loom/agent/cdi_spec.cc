#include "loom/agent/cdi_spec.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Past these a file is not a CDI spec (nvidia-ctk's are tens of kilobytes).
constexpr uintmax_t kCdiMaxFileBytes = 16 << 20;
constexpr int kCdiMaxDepth = 64;
constexpr size_t kCdiMaxValues = 1 << 20;

// A YAML document as JSON, scalars as strings (the fields read here are
// strings). False when it nests deeper or holds more values than a spec
// could.
bool CdiYamlToJson(const YAML::Node& node, int depth, size_t& values,
                   json& out) {
  if (depth > kCdiMaxDepth || ++values > kCdiMaxValues) return false;
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      out = node.Scalar();
      return true;
    case YAML::NodeType::Sequence:
      out = json::array();
      for (const YAML::Node& item : node) {
        json v;
        if (!CdiYamlToJson(item, depth + 1, values, v)) return false;
        out.push_back(std::move(v));
      }
      return true;
    case YAML::NodeType::Map:
      out = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) continue;
        json v;
        if (!CdiYamlToJson(kv.second, depth + 1, values, v)) return false;
        out[kv.first.Scalar()] = std::move(v);
      }
      return true;
    default:
      out = nullptr;
      return true;
  }
}

// Reads one spec's fields, remembering the first error as "FIELD: why".
class CdiReader {
 public:
  const std::string& error() const { return error_; }
  bool failed() const { return !error_.empty(); }

  void Fail(const std::string& field, const std::string& why) {
    if (error_.empty()) error_ = absl::StrCat(field, ": ", why);
  }

  // `obj[key]` as a string; "" (and an error when `required`) otherwise.
  std::string String(const json& obj, const std::string& path, const char* key,
                     bool required) {
    auto it = obj.find(key);
    const std::string field = Join(path, key);
    if (it == obj.end() || it->is_null()) {
      if (required) Fail(field, "required");
      return "";
    }
    if (!it->is_string()) {
      Fail(field, "must be a string");
      return "";
    }
    std::string value = it->get<std::string>();
    if (required && value.empty()) Fail(field, "must not be empty");
    return value;
  }

  std::string Path(const json& obj, const std::string& path, const char* key,
                   bool required) {
    std::string value = String(obj, path, key, required);
    if (value.empty()) return value;
    bool dotdot = false;
    for (absl::string_view part : absl::StrSplit(value, '/')) {
      if (part == "..") dotdot = true;
    }
    if (value[0] != '/' || dotdot) {
      Fail(Join(path, key), "must be an absolute path without '..'");
    }
    return value;
  }

  // `obj[key]` as a list (empty when absent).
  const json& List(const json& obj, const std::string& path, const char* key) {
    static const json kEmpty = json::array();
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return kEmpty;
    if (!it->is_array()) {
      Fail(Join(path, key), "must be a list");
      return kEmpty;
    }
    return *it;
  }

  CdiEdits Edits(const json& obj, const std::string& path) {
    CdiEdits edits;
    auto it = obj.find("containerEdits");
    if (it == obj.end() || it->is_null()) return edits;
    const std::string at = Join(path, "containerEdits");
    if (!it->is_object()) {
      Fail(at, "must be a map");
      return edits;
    }
    const json& e = *it;
    const json& env = List(e, at, "env");
    for (size_t i = 0; i < env.size(); ++i) {
      const std::string field = absl::StrCat(Join(at, "env"), "[", i, "]");
      if (!env[i].is_string()) {
        Fail(field, "must be a string");
        continue;
      }
      const std::string kv = env[i].get<std::string>();
      if (kv.find('=') == std::string::npos || kv[0] == '=') {
        Fail(field, "must be NAME=value");
      }
      edits.env.push_back(kv);
    }
    const json& nodes = List(e, at, "deviceNodes");
    for (size_t i = 0; i < nodes.size(); ++i) {
      const std::string field =
          absl::StrCat(Join(at, "deviceNodes"), "[", i, "]");
      if (!nodes[i].is_object()) {
        Fail(field, "must be a map");
        continue;
      }
      CdiDeviceNode node;
      node.path = Path(nodes[i], field, "path", true);
      node.host_path = Path(nodes[i], field, "hostPath", false);
      if (node.host_path.empty()) node.host_path = node.path;
      edits.device_nodes.push_back(std::move(node));
    }
    const json& mounts = List(e, at, "mounts");
    for (size_t i = 0; i < mounts.size(); ++i) {
      const std::string field = absl::StrCat(Join(at, "mounts"), "[", i, "]");
      if (!mounts[i].is_object()) {
        Fail(field, "must be a map");
        continue;
      }
      CdiMount m;
      m.host_path = Path(mounts[i], field, "hostPath", true);
      m.container_path = Path(mounts[i], field, "containerPath", true);
      m.type = String(mounts[i], field, "type", false);
      const json& options = List(mounts[i], field, "options");
      for (size_t k = 0; k < options.size(); ++k) {
        if (!options[k].is_string()) {
          Fail(absl::StrCat(Join(field, "options"), "[", k, "]"),
               "must be a string");
          continue;
        }
        m.options.push_back(options[k].get<std::string>());
      }
      edits.mounts.push_back(std::move(m));
    }
    edits.hooks = static_cast<int>(List(e, at, "hooks").size());
    return edits;
  }

 private:
  static std::string Join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
  }

  std::string error_;
};

bool IsCdiSpecFileName(const std::string& name) {
  return absl::EndsWith(name, ".yaml") || absl::EndsWith(name, ".yml") ||
         absl::EndsWith(name, ".json");
}

}  // namespace

bool CdiMount::readonly() const {
  return std::find(options.begin(), options.end(), "rw") == options.end();
}

absl::StatusOr<CdiSpec> ParseCdiSpec(std::string_view text,
                                     const std::string& file) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", why));
  };
  json doc;
  if (absl::EndsWith(file, ".json")) {
    doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return bad("not valid JSON");
  } else {
    try {
      size_t values = 0;
      if (!CdiYamlToJson(YAML::Load(std::string(text)), 0, values, doc)) {
        return bad("nested too deep or too large for a CDI spec");
      }
    } catch (const YAML::Exception& e) {
      return bad(absl::StrCat("not valid YAML: ", e.what()));
    }
  }
  if (!doc.is_object()) return bad("not a map (a CDI spec is one)");
  CdiReader r;
  CdiSpec spec;
  spec.file = file;
  spec.version = r.String(doc, "", "cdiVersion", true);
  spec.kind = r.String(doc, "", "kind", true);
  if (!r.failed() && spec.kind.find('/') == std::string::npos) {
    r.Fail("kind", "must be VENDOR/CLASS, like nvidia.com/gpu");
  }
  const json& devices = r.List(doc, "", "devices");
  if (!r.failed() && !doc.contains("devices")) r.Fail("devices", "required");
  for (size_t i = 0; i < devices.size(); ++i) {
    const std::string at = absl::StrCat("devices[", i, "]");
    if (!devices[i].is_object()) {
      r.Fail(at, "must be a map");
      continue;
    }
    CdiDevice device;
    device.name = r.String(devices[i], at, "name", true);
    device.edits = r.Edits(devices[i], at);
    spec.devices.push_back(std::move(device));
  }
  spec.edits = r.Edits(doc, "");
  if (r.failed()) return bad(r.error());
  return spec;
}

std::vector<CdiSpec> ReadCdiSpecs(const std::vector<std::string>& dirs,
                                  std::string_view kind,
                                  std::vector<std::string>* warnings) {
  std::vector<CdiSpec> specs;
  auto warn = [&](std::string text) {
    if (warnings != nullptr) warnings->push_back(std::move(text));
  };
  for (const std::string& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (IsCdiSpecFileName(name)) files.push_back(entry.path().string());
    }
    if (ec) {
      warn(absl::StrCat("CDI spec directory ", dir,
                        " cannot be read: ", ec.message(), "; skipped"));
      continue;
    }
    std::sort(files.begin(), files.end());
    for (const std::string& file : files) {
      std::error_code size_ec;
      if (!fs::is_regular_file(file, size_ec)) continue;
      if (fs::file_size(file, size_ec) > kCdiMaxFileBytes || size_ec) {
        warn(absl::StrCat("CDI spec ", file,
                          ": too large for a CDI spec (over 16 MiB); "
                          "skipped"));
        continue;
      }
      std::ifstream in(file);
      std::stringstream text;
      text << in.rdbuf();
      if (!in) {
        warn(absl::StrCat("CDI spec ", file, ": cannot be read; skipped"));
        continue;
      }
      absl::StatusOr<CdiSpec> spec = ParseCdiSpec(text.str(), file);
      if (!spec.ok()) {
        warn(absl::StrCat("CDI spec ", spec.status().message(), "; skipped"));
        continue;
      }
      if (spec->kind == kind) specs.push_back(*std::move(spec));
    }
  }
  return specs;
}

}  // namespace loom
