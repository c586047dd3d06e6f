#include "loom/agent/user_account.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom {

absl::StatusOr<UserAccount> LookUpSystemUser(const std::string& name) {
  const long hint = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(hint > 0 ? static_cast<size_t>(hint) : 16384);
  struct passwd pw;
  struct passwd* found = nullptr;
  int rc;
  while ((rc = ::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(),
                            &found)) == ERANGE &&
         buf.size() < (size_t{1} << 24)) {
    buf.resize(buf.size() * 2);
  }
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot look up user '", name, "': ", std::strerror(rc)));
  }
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("no user '", name, "'"));
  }
  UserAccount account;
  account.name = found->pw_name;
  account.uid = found->pw_uid;
  account.gid = found->pw_gid;
  account.home = found->pw_dir != nullptr ? found->pw_dir : "";
  return account;
}

void RunSpecAs(const UserAccount& account, TaskSpec& spec) {
  spec.uid = account.uid;
  spec.gid = account.gid;
  spec.env.try_emplace("HOME", account.home.empty() ? "/" : account.home);
  spec.env.try_emplace("USER", account.name);
  spec.env.try_emplace("LOGNAME", account.name);
  if (spec.working_dir.empty()) {
    std::error_code ec;
    spec.working_dir =
        !account.home.empty() && std::filesystem::is_directory(account.home, ec)
            ? account.home
            : "/";
  }
}

}  // namespace loom
