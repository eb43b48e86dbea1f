#include "base/memory.h"

#include <cstdio>
#include <cstring>

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

size_t current_rss_bytes() { return read_status_kb("VmRSS:"); }
size_t peak_rss_bytes() { return read_status_kb("VmHWM:"); }

}  // namespace nemo
