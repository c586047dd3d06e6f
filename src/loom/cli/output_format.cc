#include "loom/cli/output_format.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "yaml-cpp/yaml.h"

namespace loom {
namespace {

using Json = nlohmann::json;

bool YamlReadsAsNonString(const std::string& s) {
  YAML::Node node(s);
  bool b;
  double d;
  return YAML::convert<bool>::decode(node, b) ||
         YAML::convert<double>::decode(node, d);
}

void EmitYaml(YAML::Emitter& e, const Json& j) {
  switch (j.type()) {
    case Json::value_t::object:
      if (j.empty()) {
        e << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        return;
      }
      e << YAML::BeginMap;
      for (const auto& [k, v] : j.items()) {
        e << YAML::Key << k << YAML::Value;
        EmitYaml(e, v);
      }
      e << YAML::EndMap;
      return;
    case Json::value_t::array:
      if (j.empty()) {
        e << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        return;
      }
      e << YAML::BeginSeq;
      for (const Json& v : j) EmitYaml(e, v);
      e << YAML::EndSeq;
      return;
    case Json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      if (YamlReadsAsNonString(s)) e << YAML::DoubleQuoted;
      e << s;
      return;
    }
    case Json::value_t::boolean:
      e << j.get<bool>();
      return;
    case Json::value_t::number_integer:
      e << j.get<int64_t>();
      return;
    case Json::value_t::number_unsigned:
      e << j.get<uint64_t>();
      return;
    case Json::value_t::number_float:
      e << j.dump();
      return;
    default:
      e << YAML::Null;
      return;
  }
}

}  // namespace

std::string JsonToYaml(const nlohmann::json& j) {
  YAML::Emitter e;
  EmitYaml(e, j);
  std::string out = e.c_str();
  if (out.empty() || out.back() != '\n') out += '\n';
  return out;
}

std::string FormatAgo(absl::Time t, absl::Time now) {
  absl::Duration d = now - t;
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  const int64_t s = absl::ToInt64Seconds(d);
  if (s < 60) return absl::StrCat(s, "s ago");
  if (s < 3600) return absl::StrCat(s / 60, "m ago");
  if (s < 86400) return absl::StrCat(s / 3600, "h ago");
  return absl::StrCat(s / 86400, "d ago");
}

std::string FormatElapsed(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  const int64_t s = absl::ToInt64Seconds(d);
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  };
  measure(header);
  for (const auto& row : rows) measure(row);
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      if (i + 1 == width.size()) {
        line += cell;
      } else {
        line += cell;
        line.append(width[i] - cell.size() + 2, ' ');
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out;
}

std::string FormatCsv(const std::vector<std::string>& header,
                      const std::vector<std::vector<std::string>>& rows) {
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) out += ',';
      const std::string& field = row[i];
      if (field.find_first_of(",\"\r\n") == std::string::npos) {
        out += field;
        continue;
      }
      out += '"';
      for (char c : field) {
        if (c == '"') out += '"';
        out += c;
      }
      out += '"';
    }
    out += '\n';
  };
  emit(header);
  for (const auto& row : rows) emit(row);
  return out;
}

namespace cli {

std::string FormatUtc(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", t, absl::UTCTimeZone());
}

void AppendLines(std::string* out, absl::string_view text,
                 absl::string_view indent, size_t width) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::string s = absl::StrCat(indent, line);
    if (s.size() > width) s.resize(width);
    absl::StrAppend(out, s, "\n");
  }
}

bool PrintStructured(absl::string_view output, const nlohmann::json& j,
                     std::ostream& out) {
  if (output == "json") {
    out << j.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
    return true;
  }
  if (output == "yaml") {
    out << JsonToYaml(j);
    return true;
  }
  return false;
}

}  // namespace cli
}  // namespace loom
