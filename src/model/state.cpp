#include "model/state.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/numeric.h"
#include "kernels/fp8.h"

namespace nemo::model {

KvDtype parse_kv_dtype(const std::string& s) {
  if (s == "f32") return KvDtype::F32;
  if (s == "bf16") return KvDtype::BF16;
  if (s == "fp8" || s == "fp8_e4m3") return KvDtype::FP8;
  fail("--kv-cache '{}': expected f32, bf16 or fp8", s);
}
const char* kv_dtype_name(KvDtype d) { return d == KvDtype::F32 ? "f32" : d == KvDtype::BF16 ? "bf16" : "fp8"; }
int kv_dtype_bytes(KvDtype d) { return d == KvDtype::F32 ? 4 : d == KvDtype::BF16 ? 2 : 1; }

void KvCache::store(bool key, int64_t r, int64_t n, const float* src, float scale) {
  uint8_t* base = (key ? k : v).data();
  switch (dtype) {
    case KvDtype::F32: std::memcpy(base + r * n * 4, src, size_t(n) * 4); break;
    case KvDtype::BF16: {
      uint16_t* d = reinterpret_cast<uint16_t*>(base) + r * n;
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      break;
    }
    case KvDtype::FP8: {
      uint8_t* d = base + r * n;
      for (int64_t i = 0; i < n; ++i) d[i] = kernels::f32_to_e4m3(src[i] / scale);
      break;
    }
  }
}

void KvCache::load(bool key, int64_t r, int64_t n, float* dst, float scale) const {
  const uint8_t* base = (key ? k : v).data();
  switch (dtype) {
    case KvDtype::F32: std::memcpy(dst, base + r * n * 4, size_t(n) * 4); break;
    case KvDtype::BF16: {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(base) + r * n;
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      break;
    }
    case KvDtype::FP8: {
      const auto& lut = kernels::e4m3_table();
      const uint8_t* s = base + r * n;
      for (int64_t i = 0; i < n; ++i) dst[i] = lut[s[i]] * scale;
      break;
    }
  }
}

SequenceState::SequenceState(const io::ModelConfig& c, KvDtype kv_dtype) : kv_dtype_(kv_dtype) {
  const size_t L = c.layers.size();
  mamba_slot_.assign(L, -1);
  attn_slot_.assign(L, -1);
  kv_row_floats_ = c.num_key_value_heads * c.head_dim;
  for (size_t i = 0; i < L; ++i) {
    if (c.layers[i] == io::LayerKind::Mamba) {
      mamba_slot_[i] = int(mamba_.size());
      MambaState s;
      s.conv.resize(size_t((c.conv_kernel - 1) * c.conv_dim()));
      s.ssm.resize(size_t(c.mamba_num_heads * c.mamba_head_dim * c.ssm_state_size));
      mamba_.push_back(std::move(s));
    } else if (c.layers[i] == io::LayerKind::Attention) {
      attn_slot_[i] = int(kv_.size());
      kv_.emplace_back();
      kv_.back().dtype = kv_dtype;
    }
  }
  journal_.resize(mamba_.size());
}

void grow_kv(KvCache& kv, int64_t n_total, int64_t n_keep, int64_t row_floats) {
  if (n_total <= kv.capacity) return;
  const int64_t cap = std::max<int64_t>({n_total, 2 * kv.capacity, 64});
  const size_t es = size_t(kv_dtype_bytes(kv.dtype));
  Buffer<uint8_t> k(size_t(cap * row_floats) * es), v(size_t(cap * row_floats) * es);
  if (kv.capacity) {
    std::memcpy(k.data(), kv.k.data(), size_t(n_keep * row_floats) * es);
    std::memcpy(v.data(), kv.v.data(), size_t(n_keep * row_floats) * es);
  }
  kv.k = std::move(k);
  kv.v = std::move(v);
  kv.capacity = cap;
}

void SequenceState::ensure_kv_capacity(int64_t n_total) {
  for (auto& kv : kv_) grow_kv(kv, n_total, n_past_, kv_row_floats_);
}

size_t SequenceState::fixed_bytes() const {
  size_t b = 0;
  for (const auto& m : mamba_) b += m.conv.bytes() + m.ssm.bytes();
  return b;
}

size_t SequenceState::bytes() const {
  size_t b = fixed_bytes();
  for (const auto& kv : kv_) b += kv.k.bytes() + kv.v.bytes();
  for (const auto& j : journal_)
    b += j.conv0.bytes() + j.ssm0.bytes() + j.xbc.bytes() + j.x.bytes() + j.B.bytes() + j.dt.bytes();
  return b;
}

void SequenceState::reset() {
  for (auto& m : mamba_) {
    m.conv.zero();
    m.ssm.zero();
  }
  n_past_ = 0;
  pending_rows_ = 0;
}

SequenceState SequenceState::snapshot() const {
  if (pending_rows_) fail("snapshot: a recorded forward is not accepted yet");
  SequenceState s;
  s.mamba_slot_ = mamba_slot_;
  s.attn_slot_ = attn_slot_;
  s.kv_row_floats_ = kv_row_floats_;
  s.kv_dtype_ = kv_dtype_;
  s.n_past_ = n_past_;
  s.journal_.resize(journal_.size());
  for (const auto& m : mamba_) {
    MambaState c;
    c.conv.resize(m.conv.size());
    std::memcpy(c.conv.data(), m.conv.data(), m.conv.bytes());
    c.ssm.resize(m.ssm.size());
    std::memcpy(c.ssm.data(), m.ssm.data(), m.ssm.bytes());
    s.mamba_.push_back(std::move(c));
  }
  for (const auto& kv : kv_) {
    KvCache c;
    c.dtype = kv.dtype;
    grow_kv(c, n_past_, 0, kv_row_floats_);
    const size_t n = size_t(n_past_ * kv_row_floats_ * kv_dtype_bytes(kv.dtype));
    if (n) {
      std::memcpy(c.k.data(), kv.k.data(), n);
      std::memcpy(c.v.data(), kv.v.data(), n);
    }
    s.kv_.push_back(std::move(c));
  }
  return s;
}

void SequenceState::restore(const SequenceState& snap) {
  if (snap.mamba_.size() != mamba_.size() || snap.kv_.size() != kv_.size() ||
      snap.kv_row_floats_ != kv_row_floats_ || snap.kv_dtype_ != kv_dtype_)
    fail("restore: the snapshot belongs to another model or KV-cache type");
  for (size_t i = 0; i < mamba_.size(); ++i) {
    std::memcpy(mamba_[i].conv.data(), snap.mamba_[i].conv.data(), snap.mamba_[i].conv.bytes());
    std::memcpy(mamba_[i].ssm.data(), snap.mamba_[i].ssm.data(), snap.mamba_[i].ssm.bytes());
  }
  n_past_ = 0;
  pending_rows_ = 0;
  ensure_kv_capacity(snap.n_past_);
  const size_t n = size_t(snap.n_past_ * kv_row_floats_ * kv_dtype_bytes(kv_dtype_));
  for (size_t i = 0; i < kv_.size() && n; ++i) {
    std::memcpy(kv_[i].k.data(), snap.kv_[i].k.data(), n);
    std::memcpy(kv_[i].v.data(), snap.kv_[i].v.data(), n);
  }
  n_past_ = snap.n_past_;
}

}  // namespace nemo::model
