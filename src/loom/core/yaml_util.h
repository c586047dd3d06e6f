#pragma once

// Helpers shared by the YAML spec parsers of `core` (cluster specs, job
// specs): typed reads of yaml-cpp nodes that report errors as
// "<source>:<line>:<column>: <field path>: <reason>". Internal to `core`;
// yaml-cpp is a private dependency of `loom_core`, so no public header may
// include this one.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "yaml-cpp/yaml.h"

namespace loom::yaml {

// Joins a field path and a key: ("pools[1]", "gpu") -> "pools[1].gpu".
std::string ChildPath(absl::string_view path, absl::string_view key);

// Names the element `index` of the list at `path`: "pools[1]".
std::string ElementPath(absl::string_view path, size_t index);

// The text of a scalar as UTF-8. yaml-cpp decodes the escapes "\N" and "\_"
// of a double-quoted scalar to the single bytes 0x85 and 0xA0, which are not
// UTF-8; they become U+0085 and U+00A0, as YAML means. Any other invalid
// byte (input that was not checked for UTF-8) becomes U+FFFD.
std::string ScalarText(const YAML::Node& node);

// `text` (a scalar, or a message that quotes one) made UTF-8 as in
// `ScalarText`.
std::string RepairUtf8(std::string_view text);

// Writes bytes exactly with the largest binary suffix that divides them:
// "1Ti", "1536Mi", "1000" (what `ReadBytes` reads back to the same value).
std::string FormatBytesExact(int64_t bytes);

// Says what kind of YAML value `node` is, for error messages ("a list").
absl::string_view KindOf(const YAML::Node& node);

// The Levenshtein distance between `a` and `b`, used to suggest the field a
// user probably meant.
size_t EditDistance(absl::string_view a, absl::string_view b);

// One entry of a YAML map.
struct Field {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
};

// A YAML map whose keys have been checked against the allowed ones.
struct MapNode {
  YAML::Node node;
  std::string path;
  std::vector<Field> fields;

  // Returns the entry `key`, or nullptr when the map does not have it.
  const Field* Find(absl::string_view key) const {
    for (const Field& f : fields) {
      if (f.key == key) return &f;
    }
    return nullptr;
  }
};

// Typed reads of the nodes of one document. Every method returns
// InvalidArgument with "<source>:<line>:<column>: <path>: <reason>" on bad
// input and never throws itself (yaml-cpp may, on malformed documents, so
// callers wrap loading and reading in one try block). Thread-compatible.
class Reader {
 public:
  // `source` names the document in messages and must outlive the reader.
  explicit Reader(absl::string_view source) : source_(source) {}

  absl::string_view source() const { return source_; }

  // Formats an error at `mark` (0-based, as yaml-cpp keeps it) about the
  // field at `path` (may be empty). A mark without position (line -1) gives
  // "<source>: <path>: <reason>".
  absl::Status Error(const YAML::Mark& mark, absl::string_view path,
                     absl::string_view reason) const;
  absl::Status Error(const YAML::Node& node, absl::string_view path,
                     absl::string_view reason) const {
    return Error(node.Mark(), path, reason);
  }

  // Describes an exception yaml-cpp threw while loading `text`: where it
  // happened and why, with a plain hint for the common causes (a tab used
  // for indentation, nesting deeper than yaml-cpp allows).
  absl::Status LoadError(std::string_view text, const YAML::Exception& e) const;

  // Loads the one document of `text`. Returns a null node when `text` holds
  // no document (it is empty or all comments) and an error when it holds
  // more than one, or is not YAML. Unlike `YAML::LoadAll`, never loops on
  // stray text after a document ("{},"), which yaml-cpp 0.7 reads as an
  // endless series of empty documents.
  absl::StatusOr<YAML::Node> LoadDocument(std::string_view text) const;

  // Reads a map whose keys must all be in `allowed`; an unknown key is an
  // error with a "did you mean" hint, a repeated key an error naming the
  // line of the first.
  absl::StatusOr<MapNode> ReadMap(
      const YAML::Node& node, std::string path,
      std::initializer_list<absl::string_view> allowed) const;
  absl::StatusOr<std::vector<YAML::Node>> ReadList(const YAML::Node& node,
                                                   absl::string_view path,
                                                   bool allow_empty) const;
  // Returns the entry `key` of `map`, or an error saying it is required.
  absl::StatusOr<const Field*> Require(const MapNode& map,
                                       absl::string_view key) const;
  // A non-empty scalar, as written (numbers and booleans included).
  absl::StatusOr<std::string> ReadString(const YAML::Node& node,
                                         absl::string_view path) const;
  // A whole number in [min, max].
  absl::StatusOr<int64_t> ReadInt(const YAML::Node& node,
                                  absl::string_view path, int64_t min,
                                  int64_t max) const;
  // A finite number.
  absl::StatusOr<double> ReadNumber(const YAML::Node& node,
                                    absl::string_view path) const;
  // A byte quantity (`loom::ParseBytes`) of at least `min` bytes.
  absl::StatusOr<int64_t> ReadBytes(const YAML::Node& node,
                                    absl::string_view path, int64_t min) const;
  // `true` or `false` (also `True`, `TRUE`, `False`, `FALSE`).
  absl::StatusOr<bool> ReadBool(const YAML::Node& node,
                                absl::string_view path) const;
  // A duration (`loom::ParseDuration`), e.g. "90s", "12h", "1h30m".
  absl::StatusOr<absl::Duration> ReadDuration(const YAML::Node& node,
                                              absl::string_view path) const;

 private:
  absl::string_view source_;
};

}  // namespace loom::yaml
