#include "base/atomic_file.h"

#include <cstdio>
#include <filesystem>

#include "base/error.h"

namespace nemo {

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), f_(path_ + ".tmp", std::ios::binary) {
  if (!f_) fail("{}: cannot write", path_ + ".tmp");
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  f_.close();
  std::remove((path_ + ".tmp").c_str());
}

void AtomicFile::commit() {
  f_.close();
  if (!f_) fail("{}: write failed", path_ + ".tmp");
  std::filesystem::rename(path_ + ".tmp", path_);
  committed_ = true;
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.stream().write(bytes.data(), std::streamsize(bytes.size()));
  f.commit();
}

}  // namespace nemo
