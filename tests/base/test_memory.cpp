// major_page_faults counts the page faults that read from disk (bench reports those that fall
// inside its timed steps): a file dropped from the page cache and then read through a mapping
// must add to it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "base/memory.h"

namespace nemo {
namespace {

TEST(Memory, MajorPageFaultsCountReadsFromDisk) {
  // The build tree is on a disk (a tmpfs would keep the pages in memory: then skip).
  const auto path = std::filesystem::current_path() / "test_memory_major_faults.bin";
  const size_t page = size_t(sysconf(_SC_PAGESIZE)), n = 256 * page;
  {
    std::vector<char> bytes(n, 'x');
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, n, f), n);
    ASSERT_EQ(std::fflush(f), 0);
    ASSERT_EQ(fsync(fileno(f)), 0);  // clean pages: DONTNEED drops only those
    std::fclose(f);
  }
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  void* p = mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::vector<unsigned char> resident(n / page);
  ASSERT_EQ(mincore(p, n, resident.data()), 0);
  size_t cached = 0;
  for (unsigned char r : resident) cached += r & 1;
  if (cached == resident.size()) {
    munmap(p, n), close(fd), std::filesystem::remove(path);
    GTEST_SKIP() << "the file system kept the pages cached (tmpfs?)";
  }
  madvise(p, n, MADV_RANDOM);  // one page per fault, no readahead that would hide the count
  const int64_t before = major_page_faults();
  unsigned sum = 0;
  for (size_t i = 0; i < n; i += page) sum += static_cast<const volatile unsigned char*>(p)[i];
  const int64_t after = major_page_faults();
  munmap(p, n), close(fd), std::filesystem::remove(path);
  EXPECT_EQ(sum, unsigned('x') * unsigned(n / page));
  EXPECT_GT(after, before) << "touching " << (resident.size() - cached)
                           << " uncached pages took no major fault";
}

}  // namespace
}  // namespace nemo
