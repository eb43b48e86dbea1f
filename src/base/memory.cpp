#include "base/memory.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace nemo {

static size_t read_status_kb(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  const size_t klen = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, klen) == 0) {
      std::sscanf(line + klen, "%zu", &kb);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

void tune_allocator() {
#if defined(__GLIBC__)
  const char* env = std::getenv("NEMOTRON_SYSTEM_MALLOC");
  if (env && std::strcmp(env, "1") == 0) return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum; also fixes the threshold
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
#endif
}

size_t current_rss_bytes() {
  return read_status_kb("VmRSS:");
}
size_t peak_rss_bytes() {
  return read_status_kb("VmHWM:");
}
size_t current_rss_anon_bytes() {
  return read_status_kb("RssAnon:");
}
int64_t major_page_faults() {
  struct rusage u {};
  return getrusage(RUSAGE_SELF, &u) == 0 ? int64_t(u.ru_majflt) : 0;
}

size_t mapped_rss_bytes(const std::string& path_prefix, const char* field) {
  const size_t field_len = std::strlen(field);
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return 0;
  char line[4096];
  size_t kb = 0;
  bool in = false;  // inside the block of a mapping of a matching file
  while (std::fgets(line, sizeof line, f)) {
    // A mapping's header: "start-end perms offset dev inode [path]"; its fields follow as "Key:
    // value".
    const char* colon = std::strchr(line, ':');
    const char* space = std::strchr(line, ' ');
    if (!colon || (space && space < colon)) {
      const char* path = std::strchr(line, '/');
      in = path && std::strncmp(path, path_prefix.c_str(), path_prefix.size()) == 0;
    } else if (in && std::strncmp(line, field, field_len) == 0) {
      size_t v = 0;
      if (std::sscanf(line + field_len, "%zu", &v) == 1) kb += v;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

}  // namespace nemo
