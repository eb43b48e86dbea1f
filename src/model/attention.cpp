#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "kernels/ops.h"

namespace nemo::model {

AttentionWeights AttentionWeights::bind(const WeightBinder& b, const layout::Block& L) {
  using layout::Role;
  AttentionWeights w;
  w.q_proj = b.linear(L.at(Role::AttnQ));
  w.k_proj = b.linear(L.at(Role::AttnK));
  w.v_proj = b.linear(L.at(Role::AttnV));
  w.o_proj = b.linear(L.at(Role::AttnO));
  // ModelOpt's FP8 KV-cache scales ride on the k/v projection modules (formats.md §3.5).
  w.k_scale = b.scalar_or(L.at(Role::AttnK).name + ".k_scale", 1.0f);
  w.v_scale = b.scalar_or(L.at(Role::AttnV).name + ".v_scale", 1.0f);
  if (!(w.k_scale > 0.0f) || !(w.v_scale > 0.0f))
    fail("{}: k_scale/v_scale must be positive (got {}, {})", L.at(Role::AttnK).name, w.k_scale, w.v_scale);
  return w;
}

void attention_forward(const AttentionWeights& w, const io::ModelConfig& c, const float* hn, int64_t T,
                       int64_t n_past, float* out, KvCache& kv, const ThreadConfig& tc) {
  const AttnSeq one{0, T, n_past, &kv};
  attention_forward(w, c, hn, T, std::span(&one, 1), out, tc);
}

void attention_forward(const AttentionWeights& w, const io::ModelConfig& c, const float* hn,
                       int64_t T, std::span<const AttnSeq> seqs, float* out, const ThreadConfig& tc) {
  const int64_t H = c.hidden_size, HQ = c.num_attention_heads, HKV = c.num_key_value_heads, HD = c.head_dim;
  const int64_t KVW = HKV * HD, QW = HQ * HD, rep = HQ / HKV;
  std::vector<int32_t> seq_of(size_t(T), -1);  // row -> its sequence
  int64_t longest = 1;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const AttnSeq& sq = seqs[s];
    if (sq.T < 1 || sq.n_past + sq.T > sq.kv->capacity)
      fail("attention: {} rows after {} do not fit the KV cache ({} rows)", sq.T, sq.n_past,
           sq.kv->capacity);
    for (int64_t t = sq.row0; t < sq.row0 + sq.T; ++t) seq_of[size_t(t)] = int32_t(s);
    longest = std::max(longest, sq.n_past + sq.T);
  }
  Buffer<float> q(size_t(T * QW)), ctx(size_t(T * QW)), kn(size_t(T * KVW)), vn(size_t(T * KVW));
  kernels::linear(w.q_proj, hn, T, H, q.data(), QW, tc);
  kernels::linear(w.k_proj, hn, T, H, kn.data(), KVW, tc);
  kernels::linear(w.v_proj, hn, T, H, vn.data(), KVW, tc);
  for (const AttnSeq& sq : seqs)
    for (int64_t t = 0; t < sq.T; ++t) {
      sq.kv->store(true, sq.n_past + t, KVW, kn.data() + (sq.row0 + t) * KVW, w.k_scale);
      sq.kv->store(false, sq.n_past + t, KVW, vn.data() + (sq.row0 + t) * KVW, w.v_scale);
    }

  const float scale = 1.0f / std::sqrt(float(HD));
  // One (row, q-head) pair per work item: scores over its own sequence's keys 0..pos in ascending
  // order, softmax in f32, weighted sum of V in ascending key order — the same arithmetic
  // whatever T is and whichever sequences share the pass.
  parallel_for(tc, T * HQ, std::max<int64_t>(1, 65536 / (longest * HD)), [&](int64_t a, int64_t b) {
    std::vector<float> s, row(static_cast<size_t>(KVW));
    for (int64_t it = a; it < b; ++it) {
      const int64_t t = it / HQ, i = it % HQ, j = i / rep;
      const AttnSeq& sq = seqs[size_t(seq_of[size_t(t)])];
      const KvCache& kv = *sq.kv;
      const bool f32 = kv.dtype == KvDtype::F32;
      // Key/value row tau, head j, as f32 (read in place for an f32 cache).
      auto kv_row = [&](bool key, int64_t tau) -> const float* {
        if (f32) return kv.f32_row(key, tau, KVW);
        kv.load(key, tau, KVW, row.data(), key ? w.k_scale : w.v_scale);
        return row.data();
      };
      const int64_t pos = sq.n_past + (t - sq.row0);
      const float* qi = q.data() + t * QW + i * HD;
      s.resize(size_t(pos + 1));
      float mx = -INFINITY;
      if (f32)  // the keys in place, several rows a call (dot_rows: each row dot()'s bits)
        kernels::dot_rows(kv.f32_row(true, 0, KVW) + j * HD, KVW, pos + 1, qi, HD, s.data());
      for (int64_t tau = 0; tau <= pos; ++tau) {
        s[tau] = (f32 ? s[tau] : kernels::dot(qi, kv_row(true, tau) + j * HD, HD)) * scale;
        mx = std::max(mx, s[tau]);
      }
      float sum = 0.0f;
      for (int64_t tau = 0; tau <= pos; ++tau) {
        s[tau] = std::exp(s[tau] - mx);
        sum += s[tau];
      }
      const float inv = 1.0f / sum;
      float* o = ctx.data() + t * QW + i * HD;
      std::fill(o, o + HD, 0.0f);
      if (f32) {  // the values in place, o held in registers across them (the same bits)
        for (int64_t tau = 0; tau <= pos; ++tau) s[tau] = s[tau] * inv;
        kernels::axpy_rows(s.data(), pos + 1, kv.f32_row(false, 0, KVW) + j * HD, KVW, o, HD);
      } else {
        for (int64_t tau = 0; tau <= pos; ++tau)
          kernels::axpy(s[tau] * inv, kv_row(false, tau) + j * HD, o, HD);
      }
    }
  });
  kernels::linear(w.o_proj, ctx.data(), T, QW, out, H, tc);
}

}  // namespace nemo::model
