#include "model/mtp.h"

#include <cstring>

#include "base/error.h"
#include "kernels/ops.h"

namespace nemo::model {

size_t MtpState::bytes() const {
  size_t b = 0;
  for (const auto& k : kv) b += k.k.bytes() + k.v.bytes();
  return b;
}

bool MtpHead::present(const NemotronH& t) {
  return t.config().num_nextn_predict_layers > 0 && t.store().has("mtp.layers.0.eh_proj.weight");
}

std::unique_ptr<MtpHead> MtpHead::load(const NemotronH& t) {
  const auto& c = t.config();
  if (c.num_nextn_predict_layers <= 0)
    fail("{}: the checkpoint has no MTP module (num_nextn_predict_layers = 0)", t.store().dir());
  if (c.num_nextn_predict_layers > 1)
    fail("{}: num_nextn_predict_layers = {}; only one MTP module is supported", t.store().dir(),
         c.num_nextn_predict_layers);
  if (!t.store().has("mtp.layers.0.eh_proj.weight"))
    fail("{}: config declares an MTP module but tensor 'mtp.layers.0.eh_proj.weight' is missing "
         "(was the checkpoint converted without MTP?)",
         t.store().dir());
  std::unique_ptr<MtpHead> m(new MtpHead(t));
  WeightBinder b(t.store(), t.quant(), t.load_options());
  using layout::Role;
  for (size_t s = 0; s < c.mtp_layers.size(); ++s) {
    const io::LayerKind kind = c.mtp_layers[s];
    if (kind != io::LayerKind::Attention && kind != io::LayerKind::MoE)
      fail("{}: MTP sub-layer kind '{}' is not supported", t.store().dir(), io::layer_kind_name(kind));
    const layout::Block L = layout::layer_block(c, kind, layout::mtp_prefix(s), layout::Part::Mtp, int(s));
    if (const auto* e = L.find(Role::MtpENorm)) m->enorm_ = b.values(*e);
    if (const auto* h = L.find(Role::MtpHNorm)) m->hnorm_ = b.values(*h);
    if (const auto* p = L.find(Role::MtpEhProj)) m->eh_proj_ = b.linear(*p);
    if (const auto* f = L.find(Role::MtpFinalNorm)) m->final_norm_ = b.values(*f);
    m->layers_.push_back(Layer::bind(b, L, kind, c));
    if (kind == io::LayerKind::Attention) ++m->n_attn_;
  }
  if (m->layers_.empty()) fail("{}: the MTP module declares no sub-layers (mtp_layers_block_type)", t.store().dir());
  return m;
}

MtpState MtpHead::new_state() const {
  MtpState s;
  s.kv.resize(size_t(n_attn_));
  for (auto& kv : s.kv) kv.dtype = target_.load_options().kv_dtype;
  return s;
}

void MtpHead::truncate(MtpState& st, int64_t n) const {
  if (n < 0 || n > st.n_past) fail("mtp truncate: {} outside [0, {}]", n, st.n_past);
  st.n_past = n;
}

void MtpHead::forward(MtpState& st, const float* hidden, std::span<const int32_t> next_tokens, float* out_hidden,
                      const ThreadConfig& tc) const {
  const auto& c = target_.config();
  const int64_t T = int64_t(next_tokens.size()), H = c.hidden_size, V = c.vocab_size;
  if (T == 0) fail("mtp forward: no tokens");
  const int64_t kvw = c.num_key_value_heads * c.head_dim;
  for (auto& kv : st.kv) grow_kv(kv, st.n_past + T, st.n_past, kvw);
  // x0 = eh_proj([enorm(embed(t_{i+1})) ; hnorm(h_i)])  — embedding first, then hidden.
  Buffer<float> eh(size_t(T * 2 * H)), x(size_t(T * H));
  for (int64_t t = 0; t < T; ++t) {
    if (next_tokens[t] < 0 || next_tokens[t] >= V) fail("mtp: token id {} outside the vocabulary", next_tokens[t]);
    float* row = eh.data() + t * 2 * H;
    target_.embed(next_tokens[t], row);
    kernels::rms_norm(row, enorm_.data(), H, c.norm_eps, row);
    kernels::rms_norm(hidden + t * H, hnorm_.data(), H, c.norm_eps, row + H);
  }
  kernels::linear(eh_proj_, eh.data(), T, 2 * H, x.data(), H, tc);
  // x = sub-layers(x): the same layer loop as the backbone, over the module's own KV caches.
  std::vector<LayerState> states(layers_.size());
  for (size_t i = 0, attn = 0; i < layers_.size(); ++i)
    if (layers_[i].kind == io::LayerKind::Attention) states[i].kv = &st.kv[attn++];
  SeqRows seq;
  seq.T = T;
  seq.n_past = st.n_past;
  seq.states = states;
  LayerPass pass;
  pass.T = T;
  pass.seqs = std::span(&seq, 1);
  forward_layers(layers_, c, x.data(), pass, tc);
  for (int64_t t = 0; t < T; ++t)
    kernels::rms_norm(x.data() + t * H, final_norm_.data(), H, c.norm_eps, out_hidden + t * H);
  st.n_past += T;
}

}  // namespace nemo::model
