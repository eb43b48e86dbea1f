// safetensors: mmap'd reader (single file or sharded via model.safetensors.index.json) and a
// streaming writer. Tensors are handed out as views into the mapping; nothing is copied.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/mapped_file.h"

namespace nemo::io {

enum class DType : uint8_t {
  BOOL,
  U8,
  I8,
  F8_E4M3,
  F8_E5M2,
  F8_E4M3FNUZ,
  F8_E5M2FNUZ,
  F8_E8M0,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  F64,
  I64,
  U64,
  C64,
};

const char* dtype_name(DType t);
bool dtype_from_name(std::string_view s, DType* out);
// Size in bits of one element.
int dtype_bits(DType t);
// "[2, 3]": a shape as messages print it.
std::string shape_str(const std::vector<int64_t>& shape);

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // may be unaligned (MLX files): use memcpy / unaligned loads
  uint64_t nbytes = 0;
  const std::string* file = nullptr;  // owning shard path, for error messages

  int64_t numel() const;
  std::string shape_str() const;
};

// One parsed safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // validates the header fully
  const std::string& path() const { return map_.path(); }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t touch_pages() const { return map_.touch_pages(); }
  void make_resident() { map_.make_resident(); }  // MappedFile::make_resident

 private:
  MappedFile map_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint directory: model.safetensors or model.safetensors.index.json + shards.
class TensorStore {
 public:
  static TensorStore open_dir(const std::string& dir);
  static TensorStore open_file(const std::string& path);

  const TensorView* find(const std::string& name) const;  // nullptr if absent
  // Throws naming the tensor and the directory if absent.
  const TensorView& get(const std::string& name) const;
  bool has(const std::string& name) const { return find(name) != nullptr; }
  std::vector<std::string> names() const;
  uint64_t total_bytes() const;  // bytes of all tensor data
  uint64_t file_bytes() const;   // bytes of all files
  // Maps every page of every file (MappedFile::touch_pages); returns the bytes covered.
  uint64_t touch_pages() const;
  // Every file's bytes into anonymous memory at the same addresses (MappedFile::make_resident).
  void make_resident();
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

// Streaming writer: declare every tensor first (declaration order = data order), then
// begin(), then write() each tensor's bytes in that order (in one or more pieces), then finish().
// Data goes to PATH.tmp and is renamed on finish(): a failed write never leaves a half file.
class SafetensorsWriter {
 public:
  // pad_header = false writes the header unpadded, as MLX's writer does (tensors then start at
  // arbitrary alignment — useful to test readers against real MLX files).
  explicit SafetensorsWriter(std::string path, bool pad_header = true);
  ~SafetensorsWriter();
  void declare(const std::string& name, DType dtype, std::vector<int64_t> shape);
  void set_metadata(const std::string& k, const std::string& v) { metadata_[k] = v; }
  void begin();
  void write(std::span<const uint8_t> bytes);  // appends to the current tensor
  void finish();
  uint64_t data_bytes() const { return total_; }

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t nbytes;
  };
  std::string path_;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
  uint64_t total_ = 0, written_ = 0;
  bool pad_header_ = true;
  void* fp_ = nullptr;  // FILE*
};

}  // namespace nemo::io
