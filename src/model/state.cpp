#include "model/state.h"

#include <algorithm>
#include <cstring>

namespace nemo::model {

SequenceState::SequenceState(const io::ModelConfig& c) {
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
    }
  }
  journal_.resize(mamba_.size());
}

void grow_kv(KvCache& kv, int64_t n_total, int64_t n_keep, int64_t row_floats) {
  if (n_total <= kv.capacity) return;
  const int64_t cap = std::max<int64_t>({n_total, 2 * kv.capacity, 64});
  Buffer<float> k(size_t(cap * row_floats)), v(size_t(cap * row_floats));
  if (kv.capacity) {
    std::memcpy(k.data(), kv.k.data(), size_t(n_keep * row_floats) * sizeof(float));
    std::memcpy(v.data(), kv.v.data(), size_t(n_keep * row_floats) * sizeof(float));
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

}  // namespace nemo::model
