#include "io/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"

namespace nemo::io {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
struct DTypeInfo {
  DType t;
  const char* name;
  int bits;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::BOOL, "BOOL", 8},       {DType::U8, "U8", 8},
    {DType::I8, "I8", 8},           {DType::F8_E4M3, "F8_E4M3", 8},
    {DType::F8_E5M2, "F8_E5M2", 8}, {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8}, {DType::F8_E8M0, "F8_E8M0", 8},
    {DType::I16, "I16", 16},        {DType::U16, "U16", 16},
    {DType::F16, "F16", 16},        {DType::BF16, "BF16", 16},
    {DType::I32, "I32", 32},        {DType::U32, "U32", 32},
    {DType::F32, "F32", 32},        {DType::F64, "F64", 64},
    {DType::I64, "I64", 64},        {DType::U64, "U64", 64},
    {DType::C64, "C64", 64},
};
constexpr uint64_t kMaxHeader = 100'000'000;

// Parses JSON text, refusing a key that appears twice in one object: a JSON parser keeps one of
// the two silently, and a header or index that names a tensor twice is corrupt.
json parse_unique_keys(const char* begin, const char* end, const std::string& source) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  return json::parse(begin, end, [&](int, json::parse_event_t ev, json& v) {
    if (ev == json::parse_event_t::object_start)
      keys.emplace_back();
    else if (ev == json::parse_event_t::object_end)
      keys.pop_back();
    else if (ev == json::parse_event_t::key && !keys.back().insert(v.get<std::string>()).second)
      fail("{}: '{}' appears twice in one JSON object", source, v.get<std::string>());
    return true;
  });
}
}  // namespace

const char* dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.name;
  return "?";
}
bool dtype_from_name(std::string_view s, DType* out) {
  for (const auto& d : kDTypes)
    if (s == d.name) {
      *out = d.t;
      return true;
    }
  return false;
}
int dtype_bits(DType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d.bits;
  return 0;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}
std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
std::string TensorView::shape_str() const { return io::shape_str(shape); }

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(path) {
  const uint64_t size = map_.size();
  if (size < 8) fail("{}: truncated safetensors file ({} bytes; the 8-byte header length is missing)", path, size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | map_.data()[i];
  if (n > kMaxHeader) fail("{}: header length {} exceeds the {} byte limit (corrupt file?)", path, n, kMaxHeader);
  if (8 + n > size) fail("{}: truncated: header claims {} bytes but the file has {}", path, n, size);
  const char* hb = reinterpret_cast<const char*>(map_.data() + 8);
  json h;
  try {
    h = parse_unique_keys(hb, hb + n, path);
  } catch (const json::exception& e) {
    fail("{}: malformed header JSON: {}", path, e.what());
  }
  if (!h.is_object()) fail("{}: header is not a JSON object", path);
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = size - data_start;
  struct Span {
    uint64_t b, e;
    TensorView* view;
  };
  std::vector<Span> spans;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) fail("{}: __metadata__ is not an object", path);
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail("{}: __metadata__ value '{}' is not a string", path, m.key());
        metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const json& t = *it;
    if (!t.is_object()) fail("{}: tensor '{}': entry is not an object", path, name);
    if (!t.contains("dtype") || !t["dtype"].is_string())
      fail("{}: tensor '{}': missing or non-string dtype", path, name);
    if (!t.contains("shape") || !t["shape"].is_array())
      fail("{}: tensor '{}': missing or non-array shape", path, name);
    if (!t.contains("data_offsets") || !t["data_offsets"].is_array() || t["data_offsets"].size() != 2)
      fail("{}: tensor '{}': data_offsets must be [begin, end]", path, name);
    TensorView v;
    v.name = name;
    const std::string ds = t["dtype"].get<std::string>();
    if (!dtype_from_name(ds, &v.dtype)) fail("{}: tensor '{}': unknown dtype '{}'", path, name, ds);
    // numel * bits, guarding overflow
    unsigned __int128 numel = 1;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        fail("{}: tensor '{}': shape entries must be non-negative integers", path, name);
      uint64_t dv = d.get<uint64_t>();
      v.shape.push_back(int64_t(dv));
      numel *= dv;
      if (numel > (unsigned __int128)std::numeric_limits<int64_t>::max())
        fail("{}: tensor '{}': shape {} is too large", path, name, t["shape"].dump());
    }
    for (const auto& o : t["data_offsets"])
      if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<int64_t>() >= 0))
        fail("{}: tensor '{}': data_offsets must be non-negative integers", path, name);
    const uint64_t b = t["data_offsets"][0].get<uint64_t>(), e = t["data_offsets"][1].get<uint64_t>();
    if (e < b) fail("{}: tensor '{}': data_offsets end {} < begin {}", path, name, e, b);
    const unsigned __int128 bits = numel * (unsigned)dtype_bits(v.dtype);
    if (bits % 8 != 0) fail("{}: tensor '{}': {} elements of {} do not fill whole bytes", path, name, (uint64_t)numel, ds);
    if (bits / 8 != e - b)
      fail("{}: tensor '{}': dtype {} x shape {} = {} bytes, but data_offsets span {} bytes", path, name, ds,
           t["shape"].dump(), (uint64_t)(bits / 8), e - b);
    v.nbytes = e - b;
    auto [pos, inserted] = tensors_.emplace(name, std::move(v));
    if (!inserted) fail("{}: duplicate tensor '{}'", path, name);
    pos->second.file = &map_.path();
    spans.push_back({b, e, &pos->second});
  }
  // Tensors must tile the data section without holes or overlaps (as the reference parser
  // requires). In offset order, so that a truncated file names the tensor at the cut.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.b != b.b ? a.b < b.b : a.e < b.e;
  });
  uint64_t at = 0;
  for (const auto& s : spans) {
    const std::string& name = s.view->name;
    if (s.e > data_size)
      fail(
          "{}: tensor '{}': data_offsets [{}, {}] run past the end of the data ({} bytes; "
          "truncated file?)",
          path, name, s.b, s.e, data_size);
    if (s.b < at)
      fail("{}: tensor '{}' overlaps the previous tensor (offset {} < {})", path, name, s.b, at);
    if (s.b > at)
      fail("{}: hole in the data section before tensor '{}' (offset {} > {})", path, name, s.b, at);
    at = s.e;
    s.view->data = map_.data() + data_start + s.b;
  }
  if (at != data_size)
    fail("{}: data section is {} bytes but tensors cover {} (truncated or trailing bytes)", path, data_size, at);
}

TensorStore TensorStore::open_file(const std::string& path) {
  TensorStore st;
  st.dir_ = fs::path(path).parent_path().string();
  st.files_.push_back(std::make_unique<SafetensorsFile>(path));
  for (const auto& [n, v] : st.files_.back()->tensors()) st.index_[n] = &v;
  return st;
}

TensorStore TensorStore::open_dir(const std::string& dir) {
  TensorStore st;
  st.dir_ = dir;
  const fs::path idx = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(idx)) {
    json j;
    {
      MappedFile m(idx.string());
      try {
        j = parse_unique_keys(reinterpret_cast<const char*>(m.data()),
                              reinterpret_cast<const char*>(m.data() + m.size()), idx.string());
      } catch (const json::exception& e) {
        fail("{}: malformed JSON: {}", idx.string(), e.what());
      }
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: missing 'weight_map' object", idx.string());
    std::map<std::string, std::vector<std::string>> by_file;
    std::map<std::string, const std::string*> shard_of;  // every tensor of every shard -> its file
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) fail("{}: weight_map['{}'] is not a string", idx.string(), it.key());
      const std::string f = it->get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        fail("{}: weight_map['{}'] names a file outside the directory: '{}'", idx.string(), it.key(), f);
      by_file[f].push_back(it.key());
    }
    for (const auto& [f, names] : by_file) {
      const fs::path p = fs::path(dir) / f;
      if (!fs::exists(p)) fail("{}: missing shard '{}' (listed in {} for tensor '{}')", dir, f, idx.filename().string(), names.front());
      st.files_.push_back(std::make_unique<SafetensorsFile>(p.string()));
      const auto& file = *st.files_.back();
      for (const auto& [n, _] : file.tensors())
        if (auto [it, fresh] = shard_of.emplace(n, &file.path()); !fresh)
          fail("{}: tensor '{}' is in two shards: {} and {}", dir, n, *it->second, file.path());
      for (const auto& n : names) {
        auto t = file.tensors().find(n);
        if (t == file.tensors().end())
          fail("{}: tensor '{}' is listed in the index but absent from the shard", p.string(), n);
        st.index_[n] = &t->second;
      }
    }
  } else if (fs::exists(single)) {
    st.files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const auto& [n, v] : st.files_.back()->tensors()) st.index_[n] = &v;
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json found", dir);
  }
  return st;
}

const TensorView* TensorStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& TensorStore::get(const std::string& name) const {
  const TensorView* v = find(name);
  if (!v) fail("{}: missing tensor '{}'", dir_, name);
  return *v;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [n, _] : index_) out.push_back(n);
  return out;
}

uint64_t TensorStore::total_bytes() const {
  uint64_t s = 0;
  for (const auto& [_, v] : index_) s += v->nbytes;
  return s;
}
uint64_t TensorStore::touch_pages() const {
  uint64_t s = 0;
  for (const auto& f : files_) s += f->touch_pages();
  return s;
}
void TensorStore::make_resident() {
  for (auto& f : files_) f->make_resident();
}
uint64_t TensorStore::file_bytes() const {
  uint64_t s = 0;
  for (const auto& f : files_) s += fs::file_size(f->path());
  return s;
}

// ---------------------------------------------------------------------------------------------
SafetensorsWriter::SafetensorsWriter(std::string path, bool pad_header)
    : path_(std::move(path)), pad_header_(pad_header) {}

SafetensorsWriter::~SafetensorsWriter() {
  if (fp_) {
    std::fclose(static_cast<FILE*>(fp_));
    std::remove((path_ + ".tmp").c_str());
  }
}

void SafetensorsWriter::declare(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  if (fp_) fail("{}: declare('{}') after begin()", path_, name);
  uint64_t numel = 1;
  for (auto d : shape) numel *= uint64_t(d);
  entries_.push_back({name, dtype, std::move(shape), numel * dtype_bits(dtype) / 8});
  total_ += entries_.back().nbytes;
}

void SafetensorsWriter::begin() {
  json h = json::object();
  if (!metadata_.empty()) h["__metadata__"] = metadata_;
  uint64_t off = 0;
  std::set<std::string> seen;
  for (const auto& e : entries_) {
    if (!seen.insert(e.name).second) fail("{}: tensor '{}' declared twice", path_, e.name);
    h[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {off, off + e.nbytes}}};
    off += e.nbytes;
  }
  std::string hs = h.dump();
  while (pad_header_ && hs.size() % 8) hs.push_back(' ');
  FILE* f = std::fopen((path_ + ".tmp").c_str(), "wb");
  if (!f) fail("{}: cannot create: {}", path_ + ".tmp", std::strerror(errno));
  fp_ = f;
  uint8_t len[8];
  uint64_t n = hs.size();
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));
  if (std::fwrite(len, 1, 8, f) != 8 || std::fwrite(hs.data(), 1, hs.size(), f) != hs.size())
    fail("{}: write failed: {}", path_ + ".tmp", std::strerror(errno));
}

void SafetensorsWriter::write(std::span<const uint8_t> bytes) {
  if (!fp_) fail("{}: write() before begin()", path_);
  if (written_ + bytes.size() > total_) fail("{}: more data written than declared", path_);
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), static_cast<FILE*>(fp_)) != bytes.size())
    fail("{}: write failed: {}", path_ + ".tmp", std::strerror(errno));
  written_ += bytes.size();
}

void SafetensorsWriter::finish() {
  if (!fp_) begin();
  if (written_ != total_) fail("{}: {} bytes written but {} declared", path_, written_, total_);
  FILE* f = static_cast<FILE*>(fp_);
  fp_ = nullptr;
  if (std::fflush(f) != 0 || std::fclose(f) != 0) fail("{}: write failed: {}", path_, std::strerror(errno));
  std::error_code ec;
  fs::rename(path_ + ".tmp", path_, ec);
  if (ec) fail("{}: rename failed: {}", path_, ec.message());
}

}  // namespace nemo::io
