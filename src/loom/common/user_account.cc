#include "loom/common/user_account.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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
  int n = 32;
  std::vector<gid_t> groups(n);
  while (::getgrouplist(account.name.c_str(), account.gid, groups.data(), &n) <
             0 &&
         groups.size() < 65536) {
    groups.resize(static_cast<size_t>(n) + 32);
    n = static_cast<int>(groups.size());
  }
  groups.resize(static_cast<size_t>(std::max(n, 0)));
  if (groups.empty()) groups.push_back(account.gid);
  account.groups = std::move(groups);
  return account;
}

}  // namespace loom
