#include "loom/common/rclone.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "loom/common/atomic_file.h"
#include "loom/common/run_command.h"

namespace loom {

std::vector<std::string> RcloneArgv(const RcloneOptions& options,
                                    const std::string& subcommand,
                                    int retries) {
  std::vector<std::string> argv = {options.rclone,        subcommand,
                                   "--retries",           absl::StrCat(retries),
                                   "--low-level-retries", absl::StrCat(retries),
                                   "--contimeout",        "5s"};
  if (options.as != nullptr) {
    argv.push_back("--config");
    argv.push_back("/dev/null");
  } else if (!options.config.empty()) {
    argv.push_back("--config");
    argv.push_back(options.config);
  }
  return argv;
}

absl::StatusOr<std::string> RcloneListJson(const RcloneOptions& options,
                                           const std::string& source,
                                           absl::Duration timeout) {
  std::vector<std::string> argv = RcloneArgv(options, "lsjson", 1);
  argv.push_back("-R");
  argv.push_back("--files-only");
  if (!source.empty() && source[0] != '/') {
    for (const char* type : kRcloneHashTypes) {
      argv.push_back("--hash-type");
      argv.push_back(type);
    }
  }
  argv.push_back("--");
  argv.push_back(source);
  return RunForOutputAs(argv, timeout, size_t{256} << 20, options.as);
}

absl::StatusOr<std::map<std::string, std::string>> RcloneHashsum(
    const RcloneOptions& options, const std::string& type,
    const std::string& dir, const std::vector<std::string>& paths,
    absl::Duration timeout) {
  if (type.empty() || !std::all_of(type.begin(), type.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-';
      })) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", type, "' is not a hash type"));
  }
  const std::string list = dir + ".hash-files";
  std::string text;
  for (const std::string& p : paths) absl::StrAppend(&text, p, "\n");
  if (absl::Status st = WriteFileAtomically(list, text); !st.ok()) return st;
  std::vector<std::string> argv = RcloneArgv(options, "hashsum", 1);
  argv.insert(argv.begin() + 2, type);
  for (const char* extra : {"--files-from-raw", list.c_str()}) {
    argv.push_back(extra);
  }
  argv.push_back("--");
  argv.push_back(dir);
  absl::StatusOr<std::string> out =
      RunForOutput(argv, timeout, size_t{64} << 20);
  std::error_code ec;
  std::filesystem::remove(list, ec);
  if (!out.ok()) return out.status();
  // "HEX  PATH" per line.
  std::map<std::string, std::string> hashes;
  for (absl::string_view line : absl::StrSplit(*out, '\n')) {
    const size_t gap = line.find("  ");
    if (gap == absl::string_view::npos || gap == 0) continue;
    hashes[std::string(line.substr(gap + 2))] =
        absl::AsciiStrToLower(line.substr(0, gap));
  }
  return hashes;
}

}  // namespace loom
