#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "base/error.h"

namespace nemo {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("{}: mmap failed: {}", path, std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
#ifdef MADV_HUGEPAGE
    // Where the file system caches files in large folios (ext4 since Linux 6.16), pages read
    // through this mapping then come in 2 MB units, mapped by one TLB entry each: routed experts
    // (MBs each, scattered over GBs) ran 2.6x faster so on 52 layers (docs/PERFORMANCE.md).
    // A hint: errors are ignored, and pages already cached in 4 KB folios stay so.
    ::madvise(p, size_, MADV_HUGEPAGE);
#endif
  }
  ::close(fd);
}

size_t MappedFile::touch_pages() const {
  if (!data_) return 0;
#ifdef MADV_POPULATE_READ
  ::madvise(const_cast<uint8_t*>(data_), size_, MADV_POPULATE_READ);  // a hint: errors ignored
#endif
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  uint8_t sum = 0;
  // Two passes: the second was measured to still cost ~0.2 us per page on a paravirtualised VM
  // (the hypervisor fills its own tables then); after it a page costs a plain cache miss.
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < size_; i += page) sum ^= static_cast<const volatile uint8_t*>(data_)[i];
  asm volatile("" : : "r"(sum));  // the reads must happen
  return size_;
}

void MappedFile::make_resident() {
  if (!data_) return;
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path_, std::strerror(errno));
  const size_t page = size_t(::sysconf(_SC_PAGESIZE)), piece = size_t(64) << 20;
  const uintptr_t base = reinterpret_cast<uintptr_t>(data_);
  const size_t mapped = (size_ + page - 1) / page * page;
  std::unique_ptr<uint8_t[]> tmp(new uint8_t[piece]);
  // Pieces end on 2 MB-aligned addresses, so each whole huge page lies inside one piece.
  for (size_t at = 0; at < mapped;) {
    const uintptr_t next = std::min<uintptr_t>(((base + at) / piece + 1) * piece, base + mapped);
    const size_t n = size_t(next - (base + at)), n_file = std::min(n, size_ - std::min(size_, at));
    size_t got = 0;
    while (got < n_file) {
      const ssize_t r = ::pread(fd, tmp.get() + got, n_file - got, off_t(at + got));
      if (r <= 0) {
        const int e = r < 0 ? errno : EIO;
        ::close(fd);
        fail("{}: reading into memory failed at byte {}: {}", path_, at + got, std::strerror(e));
      }
      got += size_t(r);
    }
    void* p = reinterpret_cast<void*>(base + at);
    if (::mmap(p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p) {
      const int e = errno;
      ::close(fd);
      fail("{}: cannot allocate {} bytes to read it into memory: {}", path_, n, std::strerror(e));
    }
#ifdef MADV_HUGEPAGE
    ::madvise(p, n, MADV_HUGEPAGE);  // a hint: errors ignored
#endif
    std::memcpy(p, tmp.get(), n_file);
    ::mprotect(p, n, PROT_READ);
    ::posix_fadvise(fd, off_t(at), off_t(n_file), POSIX_FADV_DONTNEED);  // drop the cached copy
    at += n;
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

}  // namespace nemo
