#include "loom/trace/node_list.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "loom/trace/csv.h"

namespace loom {
namespace {

using csv::Av;
using csv::Quote;
using csv::TrimSpace;

constexpr int kMaxNodeGpus = 16;

struct NodeColumns {
  int sn = -1, cpu = -1, memory = -1, gpu = -1, model = -1;
  size_t count = 0;
};

NodeColumns MapColumns(const std::vector<std::string_view>& fields) {
  NodeColumns c;
  c.count = fields.size();
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string key = absl::AsciiStrToLower(Av(TrimSpace(fields[i])));
    const int at = static_cast<int>(i);
    if (key == "sn") c.sn = at;
    if (key == "cpu_milli") c.cpu = at;
    if (key == "memory_mib") c.memory = at;
    if (key == "gpu") c.gpu = at;
    if (key == "model") c.model = at;
  }
  return c;
}

bool ParseCount(std::string_view column, std::string_view cell, double max,
                double* out, std::string* error) {
  if (!csv::ParseNumber(Av(column), cell, out, error)) return false;
  if (*out < 0 || *out > max || *out != std::floor(*out)) {
    *error = absl::StrCat(Av(column), ": must be a whole number from 0 to ",
                          max, ", got ", Quote(TrimSpace(cell)));
    return false;
  }
  return true;
}

}  // namespace

bool IsNodeListHeader(std::string_view header_line) {
  if (header_line.starts_with(csv::kUtf8Bom)) {
    header_line.remove_prefix(csv::kUtf8Bom.size());
  }
  std::vector<std::string_view> fields;
  std::string scratch;
  if (!csv::SplitCsvLine(header_line, &fields, &scratch).empty()) return false;
  const NodeColumns c = MapColumns(fields);
  return c.sn >= 0 && c.gpu >= 0 && c.model >= 0;
}

absl::StatusOr<std::vector<NodeListEntry>> ParseNodeList(
    std::string_view text, std::string_view source) {
  if (text.starts_with(csv::kUtf8Bom)) text.remove_prefix(csv::kUtf8Bom.size());
  std::vector<NodeListEntry> nodes;
  std::unordered_set<std::string> names;
  std::vector<std::string_view> fields;
  std::string scratch;
  NodeColumns c;
  bool have_header = false;
  int line_no = 0;
  size_t pos = 0;
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(Av(source), ": line ", line_no, ": ", why));
  };
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    const size_t end = nl == std::string_view::npos ? text.size() : nl;
    std::string_view line = text.substr(pos, end - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (csv::IsBlank(line)) continue;
    if (std::string why = csv::SplitCsvLine(line, &fields, &scratch);
        !why.empty()) {
      return bad(why);
    }
    if (!have_header) {
      c = MapColumns(fields);
      for (const auto& [index, name] :
           {std::pair{c.sn, "sn"}, std::pair{c.cpu, "cpu_milli"},
            std::pair{c.memory, "memory_mib"}, std::pair{c.gpu, "gpu"},
            std::pair{c.model, "model"}}) {
        if (index < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              Av(source), ": not a node list: the header lacks column '", name,
              "' (expected sn,cpu_milli,memory_mib,gpu,model)"));
        }
      }
      have_header = true;
      continue;
    }
    if (fields.size() != c.count) {
      return bad(
          absl::StrCat("expected ", c.count, " fields, got ", fields.size()));
    }
    NodeListEntry n;
    n.line = line_no;
    n.name = std::string(TrimSpace(fields[c.sn]));
    if (n.name.empty() || n.name.size() > 253) {
      return bad(absl::StrCat("sn: must be 1 to 253 bytes, got ",
                              Quote(fields[c.sn])));
    }
    if (!names.insert(n.name).second) {
      return bad(absl::StrCat("sn: repeats node ", Quote(n.name)));
    }
    double cpu = 0, memory = 0, gpus = 0;
    std::string why;
    if (!ParseCount("cpu_milli", fields[c.cpu], 1e9, &cpu, &why) ||
        !ParseCount("memory_mib", fields[c.memory], 1e12, &memory, &why) ||
        !ParseCount("gpu", fields[c.gpu], kMaxNodeGpus, &gpus, &why)) {
      return bad(why);
    }
    if (gpus < 1) {
      return bad(absl::StrCat("gpu: must be from 1 to ", kMaxNodeGpus, ", got ",
                              Quote(TrimSpace(fields[c.gpu]))));
    }
    n.cpu_milli = static_cast<int64_t>(cpu);
    n.memory_mib = static_cast<int64_t>(memory);
    n.gpus = static_cast<int>(gpus);
    const std::string_view model = TrimSpace(fields[c.model]);
    const bool ok =
        !model.empty() && model.size() <= 64 &&
        std::all_of(model.begin(), model.end(), [](char ch) {
          return absl::ascii_isalnum(static_cast<unsigned char>(ch)) ||
                 ch == '.' || ch == '_' || ch == '-';
        });
    if (!ok) {
      return bad(absl::StrCat(
          "model: not a GPU model name (letters, digits, '.', '_', '-'): ",
          Quote(model)));
    }
    n.model = absl::AsciiStrToLower(Av(model));
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Av(source), ": the node list has no nodes"));
  }
  return nodes;
}

absl::StatusOr<std::vector<NodeListEntry>> ReadNodeListFile(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string message =
        absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(message)
                         : absl::InvalidArgumentError(message);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseNodeList(text.str(), path);
}

}  // namespace loom
