// Aligned f32 buffers for activations and state, and process memory readings.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>

namespace nemo {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// n uninitialised T, 64-byte aligned (whole 64-byte lines: a 512-bit load never splits one);
// null for n == 0. For scratch that is written before it is read; Buffer zeroes its own.
template <typename T>
std::unique_ptr<T[], FreeDeleter> alloc_aligned64(size_t n) {
  // Also tells the compiler the size is sane (GCC 12's -Wstringop-overflow otherwise warns
  // about memset sizes it derives from a negative int64 cast to size_t).
  if (n > size_t(PTRDIFF_MAX) / sizeof(T)) throw std::bad_alloc();
  const size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
  std::unique_ptr<T[], FreeDeleter> p(bytes ? static_cast<T*>(std::aligned_alloc(64, bytes))
                                            : nullptr);
  if (bytes && !p) throw std::bad_alloc();
  return p;
}

// A zero-initialised, 64-byte aligned array of trivially copyable T.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) { resize(n); }
  void resize(size_t n) {
    if (n == n_) return;
    p_ = alloc_aligned64<T>(n);
    n_ = n;
    zero();
  }
  void zero() {
    if (n_) std::memset(static_cast<void*>(p_.get()), 0, n_ * sizeof(T));
  }
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  T& operator[](size_t i) { return p_.get()[i]; }
  const T& operator[](size_t i) const { return p_.get()[i]; }
  std::span<T> span() { return {p_.get(), n_}; }
  std::span<const T> span() const { return {p_.get(), n_}; }

 private:
  std::unique_ptr<T[], FreeDeleter> p_;
  size_t n_ = 0;
};

// Tunes the C allocator (glibc) for a process that allocates the same scratch buffers on every
// forward: buffers up to 32 MB come from the heap instead of fresh mmaps, and freed heap memory is
// kept rather than returned. Otherwise a pass whose buffers outgrow glibc's adaptive mmap
// threshold (a verify pass of 5+ rows: its logits) pays a page fault per 4 KB touched on every
// call (~2 us each on a VM). NEMOTRON_SYSTEM_MALLOC=1 in the environment keeps the defaults
// (for measuring the difference). Call once at start-up, before any thread exists.
void tune_allocator();

// Resident set size now and peak (VmHWM), in bytes; 0 if unavailable.
size_t current_rss_bytes();
size_t peak_rss_bytes();
// The anonymous part of the resident set now (RssAnon: heap, stacks, anonymous mappings; not the
// pages of mapped files such as the checkpoint or the program's own code); 0 if unavailable.
size_t current_rss_anon_bytes();
// Major page faults of this process so far (getrusage: faults that read from disk, each one or
// more pages with readahead).
int64_t major_page_faults();
// Resident bytes of the mappings of files whose path starts with `path_prefix` (an absolute path;
// from /proc/self/smaps): the pages of a mapped checkpoint this process has touched.
// `field` picks another smaps counter: "FilePmdMapped:" = the part mapped in 2 MB pages.
size_t mapped_rss_bytes(const std::string& path_prefix, const char* field = "Rss:");

}  // namespace nemo
