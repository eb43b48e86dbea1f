// Output files that are either complete or absent: written to PATH.tmp and renamed over PATH
// by commit(), so an interrupted write never leaves a complete-looking file behind.
#pragma once
#include <fstream>
#include <string>
#include <string_view>

namespace nemo {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // throws naming PATH.tmp if it cannot be created
  ~AtomicFile();                          // without commit(): PATH.tmp is removed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  std::ofstream& stream() { return f_; }
  void commit();  // throws naming the file if any write failed

 private:
  std::string path_;
  std::ofstream f_;
  bool committed_ = false;
};

// `bytes` as the whole of PATH, through AtomicFile.
void write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace nemo
