#include "loom/core/yaml_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/common/units.h"
#include "loom/common/utf8.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/eventhandler.h"

namespace loom::yaml {

std::string RepairUtf8(std::string_view text) {
  if (IsValidUtf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  for (size_t i = 0; i < text.size();) {
    const size_t len = Utf8CharLength(text, i);
    if (len > 0) {
      out.append(text.substr(i, len));
      i += len;
      continue;
    }
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == 0x85 || byte == 0xA0) {
      out.push_back('\xC2');  // The lead byte of U+0080..U+00BF.
      out.push_back(text[i]);
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER.
    }
    ++i;
  }
  return out;
}

std::string ScalarText(const YAML::Node& node) {
  return RepairUtf8(node.Scalar());
}

std::string FormatBytesExact(int64_t bytes) {
  if (bytes <= 0) return "0";
  constexpr std::pair<int, absl::string_view> kSuffixes[] = {
      {50, "Pi"}, {40, "Ti"}, {30, "Gi"}, {20, "Mi"}, {10, "Ki"}};
  for (const auto& [shift, suffix] : kSuffixes) {
    if (bytes % (int64_t{1} << shift) == 0) {
      return absl::StrCat(bytes >> shift, suffix);
    }
  }
  return absl::StrCat(bytes);
}

// Joins a field path and a key: ("pools[1]", "gpu") -> "pools[1].gpu".
std::string ChildPath(absl::string_view path, absl::string_view key) {
  if (path.empty()) return std::string(key);
  return absl::StrCat(path, ".", key);
}

// Names the element `index` of the list at `path`: "pools[1]".
std::string ElementPath(absl::string_view path, size_t index) {
  return absl::StrCat(path, "[", index, "]");
}

// Says what kind of YAML value `node` is, for error messages.
absl::string_view KindOf(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "a scalar";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "nothing";
  }
  return "something else";
}

// The Levenshtein distance between `a` and `b`, used to suggest the field a
// user probably meant.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

namespace {

// Notes where a document's root node starts and whether it is null, and
// ignores everything else.
class RootFinder : public YAML::EventHandler {
 public:
  // Where the document began, where its root is, and whether it has one.
  YAML::Mark start;
  YAML::Mark root;
  bool null = true;

  void OnDocumentStart(const YAML::Mark& mark) override {
    start = mark;
    root = mark;
    null = true;
    seen_ = false;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override {
    Node(mark, /*is_null=*/true);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    Node(mark, false);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Node(mark, false);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&,
                       YAML::anchor_t, YAML::EmitterStyle::value) override {
    Node(mark, false);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Node(mark, false);
  }
  void OnMapEnd() override {}

 private:
  void Node(const YAML::Mark& mark, bool is_null) {
    if (seen_) return;
    seen_ = true;
    root = mark;
    null = is_null;
  }

  bool seen_ = false;
};

}  // namespace

absl::StatusOr<YAML::Node> Reader::LoadDocument(std::string_view text) const {
  const std::string copy(text);
  try {
    // First walk the documents without building nodes, at most three, to
    // find how many there are and to stop yaml-cpp where it would loop.
    std::istringstream events(copy);
    YAML::Parser parser(events);
    struct Doc {
      YAML::Mark start;
      YAML::Mark root;
      bool null;
    };
    std::vector<Doc> docs;
    RootFinder finder;
    while (docs.size() < 3 && parser.HandleNextDocument(finder)) {
      docs.push_back({finder.start, finder.root, finder.null});
      if (docs.size() >= 2 &&
          docs.back().start.pos == docs[docs.size() - 2].start.pos) {
        const YAML::Mark at = docs.back().start;
        const size_t pos = static_cast<size_t>(std::max(at.pos, 0));
        const std::string what =
            pos < copy.size() ? QuoteCharAt(copy, pos) : std::string("text");
        return Error(at, "",
                     absl::StrCat("unexpected ", what,
                                  " after the end of the document"));
      }
    }
    std::vector<const Doc*> content;
    for (const Doc& d : docs) {
      if (!d.null) content.push_back(&d);
    }
    if (content.empty()) return YAML::Node(YAML::NodeType::Null);
    if (content.size() > 1 || content[0] != &docs[0]) {
      const Doc& second = content.size() > 1 ? *content[1] : *content[0];
      return Error(second.root, "",
                   "a second YAML document starts here; give one document "
                   "only");
    }
    return YAML::Load(copy);
  } catch (const YAML::Exception& e) {
    return LoadError(text, e);
  }
}

absl::Status Reader::Error(const YAML::Mark& mark, absl::string_view path,
                           absl::string_view reason) const {
  std::string where(source_);
  if (mark.line >= 0) {
    absl::StrAppend(&where, ":", mark.line + 1, ":", mark.column + 1);
  }
  // Messages quote the user's scalars and yaml-cpp's own messages, which
  // may quote a single byte of a character ("unknown escape character");
  // the server sends them in JSON, so they must be UTF-8.
  if (path.empty()) {
    return absl::InvalidArgumentError(
        RepairUtf8(absl::StrCat(where, ": ", reason)));
  }
  return absl::InvalidArgumentError(
      RepairUtf8(absl::StrCat(where, ": ", path, ": ", reason)));
}

absl::StatusOr<MapNode> Reader::ReadMap(
    const YAML::Node& node, std::string path,
    std::initializer_list<absl::string_view> allowed) const {
  if (!node.IsMap()) {
    return Error(node, path, absl::StrCat("must be a map, got ", KindOf(node)));
  }
  MapNode map{node, std::move(path), {}};
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key_node = it->first;
    if (!key_node.IsScalar()) {
      return Error(key_node, map.path, "field names must be plain strings");
    }
    std::string key = key_node.Scalar();
    const std::string key_path = ChildPath(map.path, key);
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string reason = absl::StrCat("unknown field '", key, "'");
      absl::string_view closest;
      size_t best = 3;
      for (absl::string_view a : allowed) {
        const size_t d = EditDistance(key, a);
        if (d < best) {
          best = d;
          closest = a;
        }
      }
      if (!closest.empty()) {
        absl::StrAppend(&reason, " (did you mean '", closest, "'?)");
      } else {
        absl::StrAppend(
            &reason, " (expected one of: ", absl::StrJoin(allowed, ", "), ")");
      }
      return Error(key_node, key_path, reason);
    }
    if (const Field* prior = map.Find(key); prior != nullptr) {
      return Error(key_node, key_path,
                   absl::StrCat("given twice (first on line ",
                                prior->key_node.Mark().line + 1, ")"));
    }
    map.fields.push_back(Field{std::move(key), key_node, it->second});
  }
  return map;
}

absl::StatusOr<std::vector<YAML::Node>> Reader::ReadList(
    const YAML::Node& node, absl::string_view path, bool allow_empty) const {
  if (!node.IsSequence()) {
    return Error(node, path,
                 absl::StrCat("must be a list, got ", KindOf(node)));
  }
  std::vector<YAML::Node> items;
  for (auto it = node.begin(); it != node.end(); ++it) {
    items.push_back(*it);
  }
  if (items.empty() && !allow_empty) {
    return Error(node, path, "must not be empty");
  }
  return items;
}

absl::StatusOr<const Field*> Reader::Require(const MapNode& map,
                                             absl::string_view key) const {
  const Field* f = map.Find(key);
  if (f == nullptr) {
    return Error(map.node, ChildPath(map.path, key), "is required");
  }
  return f;
}

absl::StatusOr<std::string> Reader::ReadString(const YAML::Node& node,
                                               absl::string_view path) const {
  if (!node.IsScalar()) {
    return Error(node, path,
                 absl::StrCat("must be a string, got ", KindOf(node)));
  }
  if (node.Scalar().empty()) {
    return Error(node, path, "must not be empty");
  }
  return ScalarText(node);
}

absl::StatusOr<int64_t> Reader::ReadInt(const YAML::Node& node,
                                        absl::string_view path, int64_t min,
                                        int64_t max) const {
  if (!node.IsScalar()) {
    return Error(node, path,
                 absl::StrCat("must be a whole number, got ", KindOf(node)));
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(node.Scalar(), &value)) {
    return Error(
        node, path,
        absl::StrCat("must be a whole number, got '", node.Scalar(), "'"));
  }
  if (value < min || value > max) {
    if (max == std::numeric_limits<int64_t>::max()) {
      return Error(node, path,
                   absl::StrCat("must be at least ", min, ", got ", value));
    }
    return Error(
        node, path,
        absl::StrCat("must be between ", min, " and ", max, ", got ", value));
  }
  return value;
}

absl::StatusOr<double> Reader::ReadNumber(const YAML::Node& node,
                                          absl::string_view path) const {
  if (!node.IsScalar()) {
    return Error(node, path,
                 absl::StrCat("must be a number, got ", KindOf(node)));
  }
  double value = 0;
  if (!absl::SimpleAtod(node.Scalar(), &value) || !std::isfinite(value)) {
    return Error(node, path,
                 absl::StrCat("must be a number, got '", node.Scalar(), "'"));
  }
  return value;
}

absl::StatusOr<int64_t> Reader::ReadBytes(const YAML::Node& node,
                                          absl::string_view path,
                                          int64_t min) const {
  if (!node.IsScalar()) {
    return Error(node, path,
                 absl::StrCat("must be a byte quantity such as 80Gi, got ",
                              KindOf(node)));
  }
  absl::StatusOr<int64_t> bytes = ParseBytes(node.Scalar());
  if (!bytes.ok()) return Error(node, path, bytes.status().message());
  if (*bytes < min) {
    return Error(node, path,
                 min == 1 ? std::string("must be more than zero")
                          : absl::StrCat("must be at least ", min, " bytes"));
  }
  return *bytes;
}

absl::StatusOr<bool> Reader::ReadBool(const YAML::Node& node,
                                      absl::string_view path) const {
  if (node.IsScalar()) {
    const std::string& s = node.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
    return Error(node, path,
                 absl::StrCat("must be true or false, got '", s, "'"));
  }
  return Error(node, path,
               absl::StrCat("must be true or false, got ", KindOf(node)));
}

absl::StatusOr<absl::Duration> Reader::ReadDuration(
    const YAML::Node& node, absl::string_view path) const {
  if (!node.IsScalar()) {
    return Error(node, path,
                 absl::StrCat("must be a duration such as 30s or 12h, got ",
                              KindOf(node)));
  }
  absl::StatusOr<absl::Duration> d = ParseDuration(node.Scalar());
  if (!d.ok()) return Error(node, path, d.status().message());
  return *d;
}

absl::Status Reader::LoadError(std::string_view text,
                               const YAML::Exception& e) const {
  if (dynamic_cast<const YAML::DeepRecursion*>(&e) != nullptr) {
    return Error(e.mark, "", "the document is nested too deeply");
  }
  // yaml-cpp reports a tab used for indentation in several ways ("illegal
  // tab when looking for indentation", "illegal map value"); name the tab.
  if (e.mark.line >= 0) {
    size_t start = 0;
    for (int line = 0; line < e.mark.line && start != std::string_view::npos;
         ++line) {
      start = text.find('\n', start);
      if (start != std::string_view::npos) ++start;
    }
    if (start != std::string_view::npos) {
      for (size_t i = start;
           i < text.size() && (text[i] == ' ' || text[i] == '\t'); ++i) {
        if (text[i] == '\t') {
          YAML::Mark tab = e.mark;
          tab.column = static_cast<int>(i - start);
          return Error(tab, "",
                       "tabs are not allowed for indentation; indent with "
                       "spaces");
        }
      }
    }
  }
  // yaml-cpp names an unknown escape by one byte, which may be part of a
  // character: quote the whole character, at its backslash.
  if (absl::StartsWith(e.msg, "unknown escape character") && e.mark.pos >= 0) {
    const size_t end = std::min(static_cast<size_t>(e.mark.pos), text.size());
    const size_t slash = text.rfind('\\', end);
    if (slash != std::string_view::npos && slash + 1 < text.size()) {
      YAML::Mark at = e.mark;
      at.column -= static_cast<int>(end - slash);
      at.pos = static_cast<int>(slash);
      return Error(
          at, "",
          absl::StrCat("invalid YAML: unknown escape '\\' followed by ",
                       QuoteCharAt(text, slash + 1),
                       " in a double-quoted string (write '\\\\' for a "
                       "backslash, or use single quotes)"));
    }
  }
  return Error(e.mark, "", absl::StrCat("invalid YAML: ", e.msg));
}

}  // namespace loom::yaml
