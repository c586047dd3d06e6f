#pragma once

// Layers for the image tests: small tar.gz archives made with libarchive.

#include <sys/types.h>

#include <string>
#include <vector>

namespace loom::image::testing {

struct TarEntry {
  enum class Type { kFile, kDir, kSymlink, kHardLink, kCharDevice };
  std::string path;
  Type type = Type::kFile;
  std::string content;  // a file's bytes, a link's target
  mode_t mode = 0644;
  uid_t uid = 0;  // the owner the tar gives it
  gid_t gid = 0;
};

TarEntry File(std::string path, std::string content, mode_t mode = 0644);
TarEntry Dir(std::string path, mode_t mode = 0755);
TarEntry Symlink(std::string path, std::string target);
TarEntry HardLink(std::string path, std::string target);
TarEntry CharDevice(std::string path);
// `entry`, owned by `uid`:`gid` in the tar.
TarEntry OwnedBy(TarEntry entry, uid_t uid, gid_t gid);

// The entries as a gzip-compressed pax tar, in order.
std::string MakeTarGz(const std::vector<TarEntry>& entries);

// Writes `data` to `path`.
void WriteFile(const std::string& path, const std::string& data);

}  // namespace loom::image::testing
