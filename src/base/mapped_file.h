// Read-only memory mapping of a whole file (RAII). Weights are served from here, never copied.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace nemo {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws nemo::Error naming the file
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // The bytes as characters (text files).
  std::string_view text() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::string& path() const { return path_; }
  // Maps every page of the file into this process now (a read of one byte per page), so later
  // reads take no page fault. First touches are costly on some virtual machines (~2 us per 4 KB
  // page measured here): a MoE model whose experts are mapped on first use pays that inside
  // decode steps until every expert has been routed to. Returns the bytes covered.
  size_t touch_pages() const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace nemo
