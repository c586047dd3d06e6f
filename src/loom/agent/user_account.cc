#include "loom/agent/user_account.h"

#include <filesystem>
#include <system_error>


namespace loom {

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
