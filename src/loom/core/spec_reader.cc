#include "loom/core/spec_reader.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "loom/common/utf8.h"
#include "loom/core/container_spec.h"
#include "loom/core/job_name.h"
#include "loom/core/job_spec.h"
#include "loom/core/labels.h"

namespace loom::internal {
namespace {

using yaml::ChildPath;
using yaml::ElementPath;
using yaml::Field;
using yaml::KindOf;
using yaml::MapNode;
using yaml::ScalarText;

// A 0-based position in `text`, as yaml-cpp marks count (bytes).
YAML::Mark SpecMarkAt(std::string_view text, size_t offset) {
  YAML::Mark mark;
  mark.pos = static_cast<int>(offset);
  mark.line = 0;
  mark.column = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++mark.line;
      mark.column = 0;
    } else {
      ++mark.column;
    }
  }
  return mark;
}

// True when the first thing in `text` other than white space is '{', i.e.
// the document is a JSON object (or a YAML flow map).
bool SpecLooksLikeJson(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{';
}

bool IsHexDigit(char c) {
  return absl::ascii_isxdigit(static_cast<unsigned char>(c));
}

// The value of four hex digits (checked by the caller).
uint32_t HexValue4(std::string_view digits) {
  uint32_t v = 0;
  for (char c : digits) {
    const auto u = static_cast<unsigned char>(c);
    v = v * 16 +
        (absl::ascii_isdigit(u) ? u - '0' : absl::ascii_tolower(u) - 'a' + 10);
  }
  return v;
}

// JSON writes characters outside the Basic Multilingual Plane as a pair of
// UTF-16 escapes ("\ud83d\ude00"), which YAML does not read; rewrites each
// pair into YAML's "\U0001f600". Other escapes are copied unchanged.
std::string JoinSurrogateEscapes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '\\' || i + 1 >= text.size()) {
      out.push_back(text[i++]);
      continue;
    }
    if (text[i + 1] == 'u' && i + 12 <= text.size() && text[i + 6] == '\\' &&
        text[i + 7] == 'u' &&
        std::all_of(text.begin() + i + 2, text.begin() + i + 6, IsHexDigit) &&
        std::all_of(text.begin() + i + 8, text.begin() + i + 12, IsHexDigit)) {
      const uint32_t high = HexValue4(text.substr(i + 2, 4));
      const uint32_t low = HexValue4(text.substr(i + 8, 4));
      if (high >= 0xd800 && high <= 0xdbff && low >= 0xdc00 && low <= 0xdfff) {
        const uint32_t cp = 0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00);
        char buf[16];
        std::snprintf(buf, sizeof(buf), "\\U%08x", cp);
        out += buf;
        i += 12;
        continue;
      }
    }
    // Copy the escape as a unit so that "\\" never starts another one.
    out.push_back(text[i]);
    out.push_back(text[i + 1]);
    i += 2;
  }
  return out;
}

}  // namespace

bool IsValidSpecId(absl::string_view id) {
  if (id.empty() || id.size() > kMaxSpecIdLength) return false;
  return std::none_of(id.begin(), id.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

bool IsShellIdentifier(absl::string_view name) {
  if (name.empty() ||
      !(absl::ascii_isalpha(static_cast<unsigned char>(name[0])) ||
        name[0] == '_')) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool IsValidGpuModelName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxSpecIdLength ||
      !absl::ascii_isalnum(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(static_cast<unsigned char>(c)) ||
           absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '-' ||
           c == '_' || c == '.';
  });
}

absl::Duration RoundToMillis(absl::Duration d) {
  if (d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) {
    return d;
  }
  return absl::Floor(d + absl::Microseconds(500), absl::Milliseconds(1));
}

std::string FormatDurationExact(absl::Duration d) {
  const int64_t ms = absl::ToInt64Milliseconds(RoundToMillis(d));
  if (ms <= 0) return "0s";
  struct Unit {
    int64_t ms;
    absl::string_view suffix;
  };
  constexpr Unit kUnits[] = {
      {86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
  for (const Unit& u : kUnits) {
    if (ms % u.ms == 0) return absl::StrCat(ms / u.ms, u.suffix);
  }
  return absl::StrCat(ms, "ms");
}

absl::StatusOr<int> ResolvePriority(const Cluster& cluster,
                                    std::string_view name) {
  const PriorityClass* priority = cluster.FindPriorityClass(name);
  if (priority == nullptr) {
    std::vector<std::string> names;
    for (const PriorityClass& pc : cluster.priority_classes) {
      names.push_back(pc.name);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("priority: the cluster has no priority class '",
                     std::string(name), "' (it has ",
                     names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
  }
  return priority->value;
}

std::string ModelsWithGpus(const Cluster& cluster,
                           const std::vector<int>& gpus_per_model) {
  std::vector<std::string> names;
  for (size_t m = 0; m < cluster.gpu_models.size(); ++m) {
    if (m < gpus_per_model.size() && gpus_per_model[m] > 0) {
      names.push_back(cluster.gpu_models[m].name);
    }
  }
  return names.empty() ? std::string("none") : absl::StrJoin(names, ", ");
}

absl::Status SpecReader::CheckText(std::string_view text,
                                   bool check_size) const {
  if (check_size && text.size() > kMaxSpecBytes) {
    return Error(
        YAML::Mark(), "",
        absl::StrCat("the ", what_, " spec is ", text.size(),
                     " bytes; at most ", kMaxSpecBytes, " are accepted"));
  }
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      return Error(SpecMarkAt(text, i), "",
                   absl::StrCat("the control character 0x",
                                absl::Hex(c, absl::kZeroPad2),
                                " is not allowed in a spec (write it as an "
                                "escape inside double quotes)"));
    }
    const size_t n = Utf8CharLength(text, i);
    if (n == 0) {
      return Error(SpecMarkAt(text, i), "", "the spec is not valid UTF-8 text");
    }
    i += n;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SpecReader::ReadText(const YAML::Node& node,
                                                 absl::string_view path,
                                                 bool allow_empty) const {
  if (!node.IsScalar()) {
    return Error(node, path,
                 absl::StrCat("must be a string, got ", KindOf(node)));
  }
  std::string s = ScalarText(node);
  if (s.empty() && !allow_empty) {
    return Error(node, path, "must not be empty");
  }
  if (s.find('\0') != std::string::npos) {
    return Error(node, path, "must not contain NUL characters");
  }
  return s;
}

absl::StatusOr<std::string> SpecReader::ReadId(const YAML::Node& node,
                                               absl::string_view path) const {
  absl::StatusOr<std::string> id = ReadText(node, path, false);
  if (!id.ok()) return id.status();
  if (!IsValidSpecId(*id)) {
    return Error(node, path,
                 absl::StrCat("'", *id, "' is not a valid name (at most ",
                              kMaxSpecIdLength,
                              " characters, no spaces or control characters)"));
  }
  return id;
}

absl::StatusOr<std::string> SpecReader::ReadUser(const YAML::Node& node,
                                                 absl::string_view path) const {
  absl::StatusOr<std::string> user = ReadText(node, path, false);
  if (!user.ok()) return user.status();
  if (!IsValidUserName(*user)) {
    return Error(node, path,
                 absl::StrCat("'", *user, "' is not a valid user name (1 to ",
                              kMaxUserNameLength,
                              " letters, digits, '_', '.', '-', '@', "
                              "starting with a letter, digit or '_')"));
  }
  return user;
}

absl::StatusOr<std::string> SpecReader::ReadName(const YAML::Node& node,
                                                 absl::string_view path) const {
  absl::StatusOr<std::string> name = ReadText(node, path, false);
  if (!name.ok()) return name.status();
  if (!IsValidJobName(*name)) {
    return Error(node, path,
                 absl::StrCat("'", *name, "' is not a valid ", what_,
                              " name (1 to 63 lower-case letters, digits and "
                              "'-', starting with a letter)"));
  }
  return name;
}

absl::StatusOr<std::string> SpecReader::ReadPath(const YAML::Node& node,
                                                 absl::string_view path) const {
  absl::StatusOr<std::string> p = ReadText(node, path, false);
  if (!p.ok()) return p.status();
  if ((*p)[0] != '/') {
    return Error(node, path,
                 absl::StrCat("must be an absolute path, got '", *p, "'"));
  }
  if (p->size() > kMaxPathLength) {
    return Error(node, path,
                 absl::StrCat("is longer than ", kMaxPathLength, " bytes"));
  }
  return p;
}

absl::StatusOr<int> SpecReader::ReadSignal(const YAML::Node& node,
                                           absl::string_view path) const {
  if (!node.IsScalar()) {
    return Error(
        node, path,
        absl::StrCat("must be a signal such as SIGTERM, got ", KindOf(node)));
  }
  absl::StatusOr<int> signal = ParseSignal(node.Scalar());
  if (!signal.ok()) return Error(node, path, signal.status().message());
  if (*signal == SIGKILL || *signal == SIGSTOP) {
    return Error(
        node, path,
        absl::StrCat(SignalName(*signal), " cannot be caught, so the ", what_,
                     " would get no warning; loom sends SIGKILL "
                     "itself when the grace period ends (set grace: "
                     "0s to skip it)"));
  }
  return signal;
}

absl::StatusOr<absl::Duration> SpecReader::ReadBoundedDuration(
    const YAML::Node& node, absl::string_view path, absl::Duration min,
    absl::Duration max) const {
  absl::StatusOr<absl::Duration> d = ReadDuration(node, path);
  if (!d.ok()) return d.status();
  const absl::Duration rounded = RoundToMillis(*d);
  if (rounded < min) {
    return Error(
        node, path,
        min == absl::Milliseconds(1)
            ? std::string("must be at least 1ms")
            : absl::StrCat("must be at least ", FormatDurationExact(min)));
  }
  if (rounded > max) {
    return Error(node, path,
                 absl::StrCat("must be at most ", FormatDurationExact(max),
                              ", got '", node.Scalar(), "'"));
  }
  return rounded;
}

absl::StatusOr<MapNode> SpecReader::ReadFields(
    const YAML::Node& node, std::string path,
    std::initializer_list<absl::string_view> allowed) const {
  absl::StatusOr<MapNode> map = ReadMap(node, std::move(path), allowed);
  if (!map.ok()) return map.status();
  for (const Field& f : map->fields) {
    if (f.value.IsNull()) {
      return Error(f.key_node, ChildPath(map->path, f.key),
                   "has no value (write \"\" for an empty string)");
    }
  }
  return map;
}

absl::StatusOr<std::string> SpecReader::ReadGpuModel(
    const YAML::Node& node, absl::string_view path) const {
  absl::StatusOr<std::string> model = ReadText(node, path, false);
  if (!model.ok()) return model.status();
  std::string lower = absl::AsciiStrToLower(*model);
  if (!IsValidGpuModelName(lower)) {
    return Error(node, path,
                 absl::StrCat("'", *model,
                              "' is not a GPU model name (e.g. h200, a100 "
                              "or any)"));
  }
  return lower;
}

absl::StatusOr<int64_t> SpecReader::ReadCpusMilli(
    const YAML::Node& node, absl::string_view path) const {
  absl::StatusOr<double> cpus = ReadNumber(node, path);
  if (!cpus.ok()) return cpus.status();
  if (*cpus < 0) {
    return Error(node, path,
                 absl::StrCat("must not be negative, got ", node.Scalar()));
  }
  if (*cpus > kMaxCoresPerTask) {
    return Error(node, path,
                 absl::StrCat("must be at most ", kMaxCoresPerTask,
                              " cores, got ", node.Scalar()));
  }
  const int64_t milli = std::llround(*cpus * 1000);
  if (milli == 0 && *cpus > 0) {
    return Error(
        node, path,
        absl::StrCat("must be 0 or at least 0.001 cores, got ", node.Scalar()));
  }
  return milli;
}

absl::StatusOr<int64_t> SpecReader::ReadMemory(const YAML::Node& node,
                                               absl::string_view path) const {
  absl::StatusOr<int64_t> bytes = ReadBytes(node, path, 0);
  if (!bytes.ok()) return bytes.status();
  if (*bytes > kMaxMemoryPerTask) {
    return Error(node, path,
                 absl::StrCat("must be at most 1Pi, got ", node.Scalar()));
  }
  return bytes;
}

absl::Status SpecReader::ChargeArgvEnv(const YAML::Node& node,
                                       absl::string_view path, size_t bytes) {
  argv_env_bytes_ += bytes;
  if (argv_env_bytes_ > kMaxArgvEnvBytes) {
    return Error(node, path,
                 absl::StrCat("the command and env of a task take more than ",
                              kMaxArgvEnvBytes, " bytes together"));
  }
  return absl::OkStatus();
}

absl::Status SpecReader::ReadCommand(const Field& field,
                                     std::vector<std::string>* argv) {
  const std::string& path = field.key;
  const YAML::Node& node = field.value;
  if (node.IsScalar()) {
    absl::StatusOr<std::string> script = ReadText(node, path, false);
    if (!script.ok()) return script.status();
    if (absl::StripAsciiWhitespace(*script).empty()) {
      return Error(node, path, "must not be blank");
    }
    if (absl::Status st = ChargeArgvEnv(node, path, script->size() + 12);
        !st.ok()) {
      return st;
    }
    *argv = {"/bin/sh", "-c", *std::move(script)};
    return absl::OkStatus();
  }
  if (!node.IsSequence()) {
    return Error(node, path,
                 absl::StrCat("must be a list of strings or one string (run "
                              "by /bin/sh -c), got ",
                              KindOf(node)));
  }
  absl::StatusOr<std::vector<YAML::Node>> items =
      ReadList(node, path, /*allow_empty=*/false);
  if (!items.ok()) return items.status();
  if (items->size() > kMaxArgs) {
    return Error(node, path,
                 absl::StrCat("has ", items->size(), " arguments; at most ",
                              kMaxArgs, " are allowed"));
  }
  std::vector<std::string> args;
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string item_path = ElementPath(path, i);
    if ((*items)[i].IsNull()) {
      const YAML::Mark mark =
          (*items)[i].Mark().line >= 0 ? (*items)[i].Mark() : node.Mark();
      return Error(mark, item_path,
                   "has no value (write \"\" for an empty "
                   "argument)");
    }
    absl::StatusOr<std::string> arg =
        ReadText((*items)[i], item_path, /*allow_empty=*/i > 0);
    if (!arg.ok()) return arg.status();
    if (absl::Status st =
            ChargeArgvEnv((*items)[i], item_path, arg->size() + 1);
        !st.ok()) {
      return st;
    }
    args.push_back(*std::move(arg));
  }
  *argv = std::move(args);
  return absl::OkStatus();
}

absl::Status SpecReader::ReadEnv(const Field& field,
                                 std::span<const absl::string_view> reserved,
                                 std::map<std::string, std::string>* env) {
  const std::string& path = field.key;
  const YAML::Node& node = field.value;
  if (!node.IsMap()) {
    return Error(
        node, path,
        absl::StrCat("must be a map of NAME: value, got ", KindOf(node)));
  }
  std::map<std::string, int> lines;  // name -> 1-based line
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    if (!key.IsScalar()) {
      return Error(key, path, "variable names must be plain strings");
    }
    const std::string& name = key.Scalar();
    const std::string var_path = ChildPath(path, name);
    if (!IsSettableEnvName(name) ||
        std::find(reserved.begin(), reserved.end(), name) != reserved.end()) {
      if (name.size() > kMaxEnvNameLength || !IsShellIdentifier(name)) {
        return Error(
            key, var_path,
            absl::StrCat("'", name,
                         "' is not a valid variable name (letters, "
                         "digits and '_', not starting with a digit)"));
      }
      return Error(key, var_path,
                   "is set by loom for every task and cannot be overridden");
    }
    if (auto prior = lines.find(name); prior != lines.end()) {
      return Error(
          key, var_path,
          absl::StrCat("given twice (first on line ", prior->second, ")"));
    }
    lines.emplace(name, key.Mark().line + 1);
    if (lines.size() > kMaxEnvVars) {
      return Error(key, var_path,
                   absl::StrCat("more than ", kMaxEnvVars, " variables"));
    }
    if (value.IsNull()) {
      return Error(value.Mark().line >= 0 ? value.Mark() : key.Mark(), var_path,
                   "has no value (write \"\" for an empty one)");
    }
    absl::StatusOr<std::string> text =
        ReadText(value, var_path, /*allow_empty=*/true);
    if (!text.ok()) return text.status();
    if (absl::Status st =
            ChargeArgvEnv(value, var_path, name.size() + text->size() + 2);
        !st.ok()) {
      return st;
    }
    (*env)[name] = *std::move(text);
  }
  return absl::OkStatus();
}

absl::Status SpecReader::ReadLabels(
    const Field& field, std::map<std::string, std::string>* out) const {
  const std::string& path = field.key;
  const YAML::Node& node = field.value;
  if (!node.IsMap()) {
    return Error(node, path,
                 absl::StrCat("must be a map of strings, got ", KindOf(node)));
  }
  std::map<std::string, int> lines;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    if (!key.IsScalar()) {
      return Error(key, path, "label names must be plain strings");
    }
    const std::string& name = key.Scalar();
    const std::string label_path = ChildPath(path, name);
    if (!IsValidLabelKey(name)) {
      return Error(
          key, label_path,
          absl::StrCat("'", name, "' is not a valid label name (at most ",
                       kMaxLabelKeyLength,
                       " letters, digits, '-', '_', '.', '/', "
                       "starting with a letter or digit)"));
    }
    if (auto prior = lines.find(name); prior != lines.end()) {
      return Error(
          key, label_path,
          absl::StrCat("given twice (first on line ", prior->second, ")"));
    }
    lines.emplace(name, key.Mark().line + 1);
    if (lines.size() > kMaxLabels) {
      return Error(key, label_path,
                   absl::StrCat("more than ", kMaxLabels, " labels"));
    }
    if (value.IsNull()) {
      return Error(value.Mark().line >= 0 ? value.Mark() : key.Mark(),
                   label_path, "has no value (write \"\" for an empty one)");
    }
    absl::StatusOr<std::string> text =
        ReadText(value, label_path, /*allow_empty=*/true);
    if (!text.ok()) return text.status();
    if (text->size() > kMaxLabelValueLength) {
      return Error(
          value, label_path,
          absl::StrCat("is longer than ", kMaxLabelValueLength, " bytes"));
    }
    (*out)[name] = *std::move(text);
  }
  return absl::OkStatus();
}

absl::Status ParseDocument(
    const SpecReader& reader, std::string_view text, bool check_size,
    absl::string_view empty_hint,
    absl::FunctionRef<absl::Status(const YAML::Node&)> parse) {
  if (absl::Status st = reader.CheckText(text, check_size); !st.ok()) {
    return st;
  }
  const std::string document =
      SpecLooksLikeJson(text) ? JoinSurrogateEscapes(text) : std::string(text);
  try {
    absl::StatusOr<YAML::Node> root = reader.LoadDocument(document);
    if (!root.ok()) return root.status();
    if (root->IsNull()) {
      return reader.Error(
          YAML::Mark(), "",
          absl::StrCat("the ", reader.what(), " spec is empty; ", empty_hint));
    }
    return parse(*root);
  } catch (const YAML::Exception& e) {
    return reader.LoadError(document, e);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(std::string(reader.source()),
                                            ": reading the ", reader.what(),
                                            " spec failed: ", e.what()));
  }
}

}  // namespace loom::internal
