#include "loom/image/test_layers.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fstream>
#include <stdexcept>

namespace loom::image::testing {

TarEntry File(std::string path, std::string content, mode_t mode) {
  return {std::move(path), TarEntry::Type::kFile, std::move(content), mode};
}
TarEntry Dir(std::string path, mode_t mode) {
  return {std::move(path), TarEntry::Type::kDir, "", mode};
}
TarEntry Symlink(std::string path, std::string target) {
  return {std::move(path), TarEntry::Type::kSymlink, std::move(target), 0777};
}
TarEntry HardLink(std::string path, std::string target) {
  return {std::move(path), TarEntry::Type::kHardLink, std::move(target), 0644};
}
TarEntry CharDevice(std::string path) {
  return {std::move(path), TarEntry::Type::kCharDevice, "", 0666};
}
TarEntry OwnedBy(TarEntry entry, uid_t uid, gid_t gid) {
  entry.uid = uid;
  entry.gid = gid;
  return entry;
}

std::string MakeTarGz(const std::vector<TarEntry>& entries) {
  std::string out(1 << 20, '\0');
  size_t used = 0;
  archive* a = archive_write_new();
  archive_write_add_filter_gzip(a);
  archive_write_set_format_pax_restricted(a);
  archive_write_set_bytes_in_last_block(a, 1);
  if (archive_write_open_memory(a, out.data(), out.size(), &used) !=
      ARCHIVE_OK) {
    throw std::runtime_error(archive_error_string(a));
  }
  for (const TarEntry& t : entries) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, t.path.c_str());
    archive_entry_set_perm(e, t.mode);
    archive_entry_set_uid(e, t.uid);
    archive_entry_set_gid(e, t.gid);
    archive_entry_set_mtime(e, 1700000000, 0);
    switch (t.type) {
      case TarEntry::Type::kFile:
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_size(e, static_cast<la_int64_t>(t.content.size()));
        break;
      case TarEntry::Type::kDir:
        archive_entry_set_filetype(e, AE_IFDIR);
        break;
      case TarEntry::Type::kSymlink:
        archive_entry_set_filetype(e, AE_IFLNK);
        archive_entry_set_symlink(e, t.content.c_str());
        break;
      case TarEntry::Type::kHardLink:
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_hardlink(e, t.content.c_str());
        break;
      case TarEntry::Type::kCharDevice:
        archive_entry_set_filetype(e, AE_IFCHR);
        archive_entry_set_rdev(e, makedev(1, 3));
        break;
    }
    archive_write_header(a, e);
    if (t.type == TarEntry::Type::kFile && !t.content.empty()) {
      archive_write_data(a, t.content.data(), t.content.size());
    }
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  out.resize(used);
  return out;
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

}  // namespace loom::image::testing
