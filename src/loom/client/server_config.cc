#include "loom/client/server_config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "loom/client/api_client.h"
#include "yaml-cpp/yaml.h"

namespace loom {
namespace {

constexpr char kNoServerHelp[] =
    "no loom server given: pass --server URL, set LOOM_SERVER=URL, or write "
    "`server: URL` into ~/.config/loom/config.yaml (or the file that "
    "$LOOM_CONFIG names)";

std::string Location(std::string_view path, const YAML::Mark& mark) {
  if (mark.line < 0) return std::string(path);
  return absl::StrCat(std::string(path), ":", mark.line + 1, ":",
                      mark.column + 1);
}

}  // namespace

std::optional<std::string> GetProcessEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

absl::StatusOr<std::vector<std::string>> ParseServerUrls(
    std::string_view text, std::string_view source) {
  std::vector<std::string> urls;
  for (absl::string_view item :
       absl::StrSplit(absl::string_view(text.data(), text.size()), ',',
                      absl::SkipWhitespace())) {
    absl::StatusOr<std::string> url =
        NormalizeServerUrl(std::string_view(item.data(), item.size()));
    if (!url.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(source), ": ", std::string(url.status().message())));
    }
    urls.push_back(*std::move(url));
  }
  if (urls.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source), ": no server URL given"));
  }
  return urls;
}

absl::StatusOr<std::vector<std::string>> ParseConfigServers(
    std::string_view text, std::string_view path) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(Location(path, e.mark), ": ", e.msg));
  }
  if (!root.IsDefined() || root.IsNull()) return std::vector<std::string>{};
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Location(path, root.Mark()),
                     ": the config file must be a map of "
                     "settings (e.g. `server: URL`)"));
  }
  const YAML::Node server = root["server"];
  if (!server.IsDefined() || server.IsNull()) {
    return std::vector<std::string>{};
  }
  const std::string where =
      absl::StrCat(Location(path, server.Mark()), ": server");
  std::string joined;
  if (server.IsScalar()) {
    joined = server.Scalar();
  } else if (server.IsSequence()) {
    for (const YAML::Node& item : server) {
      if (!item.IsScalar()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": list items must be URLs"));
      }
      absl::StrAppend(&joined, joined.empty() ? "" : ",", item.Scalar());
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": must be a URL or a list of URLs"));
  }
  return ParseServerUrls(joined, where);
}

namespace {

absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          std::string_view source) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(source), ": cannot read the token file ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(source), ": the token file ", path, " is empty"));
  }
  return token;
}

}  // namespace

absl::StatusOr<std::string> DiscoverToken(std::string_view flag,
                                          const GetEnvFn& getenv) {
  if (!flag.empty()) return ReadTokenFile(std::string(flag), "--token-file");
  if (std::optional<std::string> env = getenv("LOOM_TOKEN");
      env.has_value() && !env->empty()) {
    return std::string(absl::StripAsciiWhitespace(*env));
  }
  if (std::optional<std::string> env = getenv("LOOM_TOKEN_FILE");
      env.has_value() && !env->empty()) {
    return ReadTokenFile(*env, "LOOM_TOKEN_FILE");
  }
  std::optional<std::string> home = getenv("HOME");
  std::string config;
  if (std::optional<std::string> env = getenv("LOOM_CONFIG");
      env.has_value() && !env->empty()) {
    config = *env;
  } else if (home.has_value() && !home->empty()) {
    config = absl::StrCat(*home, "/.config/loom/config.yaml");
  }
  if (!config.empty()) {
    std::ifstream in(config);
    if (in) {
      try {
        YAML::Node root = YAML::Load(in);
        if (root.IsMap() && root["token_file"]) {
          return ReadTokenFile(root["token_file"].as<std::string>(),
                               absl::StrCat(config, ": token_file"));
        }
      } catch (const YAML::Exception& e) {
        return absl::InvalidArgumentError(absl::StrCat(config, ": ", e.what()));
      }
    }
  }
  if (home.has_value() && !home->empty()) {
    const std::string path = absl::StrCat(*home, "/.config/loom/token");
    if (std::ifstream(path)) return ReadTokenFile(path, path);
  }
  return std::string();
}

absl::StatusOr<ServerList> DiscoverServers(std::string_view flag,
                                           const GetEnvFn& getenv) {
  if (!flag.empty()) {
    absl::StatusOr<std::vector<std::string>> urls =
        ParseServerUrls(flag, "--server");
    if (!urls.ok()) return urls.status();
    return ServerList{*std::move(urls), "--server"};
  }
  if (std::optional<std::string> env = getenv("LOOM_SERVER");
      env.has_value() && !env->empty()) {
    absl::StatusOr<std::vector<std::string>> urls =
        ParseServerUrls(*env, "LOOM_SERVER");
    if (!urls.ok()) return urls.status();
    return ServerList{*std::move(urls), "LOOM_SERVER"};
  }
  std::string path;
  bool must_exist = false;
  if (std::optional<std::string> env = getenv("LOOM_CONFIG");
      env.has_value() && !env->empty()) {
    path = *env;
    must_exist = true;
  } else if (std::optional<std::string> home = getenv("HOME");
             home.has_value() && !home->empty()) {
    path = absl::StrCat(*home, "/.config/loom/config.yaml");
  }
  if (!path.empty()) {
    std::ifstream in(path);
    if (!in) {
      if (must_exist) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cannot read the config file ", path, " (named by LOOM_CONFIG)"));
      }
    } else {
      std::stringstream text;
      text << in.rdbuf();
      absl::StatusOr<std::vector<std::string>> urls =
          ParseConfigServers(text.str(), path);
      if (!urls.ok()) return urls.status();
      if (!urls->empty()) return ServerList{*std::move(urls), path};
      return absl::InvalidArgumentError(
          absl::StrCat(path, " has no `server:` setting; ", kNoServerHelp));
    }
  }
  return absl::InvalidArgumentError(kNoServerHelp);
}

}  // namespace loom
