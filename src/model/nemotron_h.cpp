#include "model/nemotron_h.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/clock.h"
#include "base/error.h"
#include "kernels/ops.h"

namespace nemo::model {

NemotronH::NemotronH(io::ModelConfig cfg, io::TensorStore store, io::QuantConfig qc, LoadOptions opt)
    : cfg_(std::move(cfg)), store_(std::move(store)), qc_(std::move(qc)), opt_(opt) {}

std::unique_ptr<NemotronH> NemotronH::load(const std::string& dir, const LoadOptions& opt) {
  io::ModelConfig cfg = io::load_model_config(dir);
  io::QuantConfig qc = io::load_quant_config(dir);
  io::TensorStore store = io::TensorStore::open_dir(dir);
  std::unique_ptr<NemotronH> m(new NemotronH(std::move(cfg), std::move(store), std::move(qc), opt));
  const auto& c = m->cfg_;
  WeightBinder b(m->store_, m->qc_, opt);
  m->prefix_ = layout::backbone_prefix([&](const std::string& n) { return b.has(n); });
  // Everything outside the layers (embeddings, norm_f, lm_head) from the layout's top-level entries.
  const auto all = layout::target_tensors(c, {.prefix = m->prefix_, .mtp = false});
  for (const auto& s : all) {
    if (s.role == layout::Role::Embedding) m->embeddings_ = b.linear(s);
    if (s.role == layout::Role::FinalNorm) m->norm_f_ = b.values(s);
    if (s.role == layout::Role::LmHead) {
      if (b.has(s.tensor_name())) m->lm_head_ = b.linear(s);
      else if (c.tie_word_embeddings) m->lm_head_ = m->embeddings_;
      else fail("{}: missing tensor '{}' (tie_word_embeddings is false)", dir, s.tensor_name());
    }
  }
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const layout::Block L = layout::layer_block(c, c.layers[i], layout::layer_prefix(m->prefix_, i),
                                                layout::Part::Backbone, int(i));
    m->layers_.push_back(Layer::bind(b, L, c.layers[i], c));
  }
  return m;
}

int64_t NemotronH::weight_bytes() const { return int64_t(store_.total_bytes()); }

int64_t NemotronH::decode_bytes_per_token() const {
  int64_t b = lm_head_.bytes() + embeddings_.bytes() / std::max<int64_t>(1, embeddings_.rows);
  for (const Layer& L : layers_) {
    b += int64_t(L.norm_w.size()) * 2;
    if (const auto* m = std::get_if<Mamba2Weights>(&L.mixer)) b += m->in_proj.bytes() + m->out_proj.bytes();
    if (const auto* a = std::get_if<AttentionWeights>(&L.mixer))
      b += a->q_proj.bytes() + a->k_proj.bytes() + a->v_proj.bytes() + a->o_proj.bytes();
    if (const auto* p = std::get_if<MlpWeights>(&L.mixer)) b += p->up.bytes() + p->down.bytes();
    if (const auto* e = std::get_if<MoEWeights>(&L.mixer)) {
      int64_t experts = 0;
      for (const auto& x : e->experts) experts += x.up.bytes() + x.down.bytes();
      b += e->gate.bytes() + experts / int64_t(e->experts.size()) * cfg_.num_experts_per_tok;
      for (const auto& x : e->shared) b += x.up.bytes() + x.down.bytes();
    }
  }
  return b;
}

void NemotronH::embed(int32_t token, float* out) const { kernels::dequantize_row(embeddings_, token, out); }

void NemotronH::logits_from_hidden(const float* hidden, int64_t n, float* logits, const ThreadConfig& tc) const {
  kernels::linear(lm_head_, hidden, n, cfg_.hidden_size, logits, cfg_.vocab_size, tc);
}

ForwardResult NemotronH::forward(SequenceState& st, std::span<const int32_t> tokens, const ForwardOptions& opt,
                                 const ThreadConfig& tc) const {
  const int64_t T = int64_t(tokens.size()), H = cfg_.hidden_size, V = cfg_.vocab_size;
  if (T == 0) fail("forward: no tokens");
  for (int64_t t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= V) fail("token id {} at position {} is outside the vocabulary [0, {})", tokens[t], t, V);
  st.pending_rows_ = 0;  // an unaccepted recorded round is implicitly accepted in full
  const int64_t n_past = st.n_past_;
  st.ensure_kv_capacity(n_past + T);

  // h = embed(tokens)
  Buffer<float> h(size_t(T * H));
  for (int64_t t = 0; t < T; ++t) embed(tokens[t], h.data() + t * H);
  // h = layers(h)
  std::vector<LayerState> states(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (const int s = st.mamba_slot_[i]; s >= 0) {
      states[i].mamba = &st.mamba_[size_t(s)];
      if (opt.record) states[i].journal = &st.journal_[size_t(s)];
    }
    if (const int s = st.attn_slot_[i]; s >= 0) states[i].kv = &st.kv_[size_t(s)];
  }
  ForwardResult r;
  const int64_t n_taps = int64_t(opt.taps.size());
  for (auto L : opt.taps)
    if (L < 0 || L >= int64_t(layers_.size())) fail("tap layer {} is outside [0, {})", L, layers_.size());
  if (n_taps) r.taps.resize(size_t(T * n_taps * H));
  forward_layers(layers_, states, cfg_, h.data(),
                 {.T = T,
                  .n_past = n_past,
                  .mamba = {opt.record, opt.ssd_min_rows},
                  .profile = opt.profile,
                  .taps = opt.taps,
                  .tap_out = r.taps.data()},
                 tc);
  if (opt.tap_last_post_norm)
    for (int64_t k = 0; k < n_taps; ++k)
      if (opt.taps[k] + 1 == int64_t(layers_.size()))
        for (int64_t t = 0; t < T; ++t) {
          float* row = r.taps.data() + (t * n_taps + k) * H;
          kernels::rms_norm(row, norm_f_.data(), H, cfg_.norm_eps, row);
        }
  st.n_past_ = n_past + T;
  if (opt.record) st.pending_rows_ = T;

  // logits = lm_head(norm_f(h)) for the last row, or every row.
  const double t1 = opt.profile ? now_seconds() : 0.0;
  r.rows = opt.all_logits ? T : 1;
  r.first_row = T - r.rows;
  Buffer<float> hf(size_t(r.rows * H));
  for (int64_t t = 0; t < r.rows; ++t)
    kernels::rms_norm(h.data() + (r.first_row + t) * H, norm_f_.data(), H, cfg_.norm_eps, hf.data() + t * H);
  r.logits.resize(size_t(r.rows * V));
  logits_from_hidden(hf.data(), r.rows, r.logits.data(), tc);
  // A NaN or Inf weight (embedding row, projection) surfaces here: refuse to sample from it.
  for (int64_t t = 0; t < r.rows; ++t)
    for (int64_t v = 0; v < V; ++v)
      if (!std::isfinite(r.logits[size_t(t * V + v)]))
        fail("{}: non-finite logits (row {}, token id {}): the checkpoint holds NaN or Inf values on this path",
             store_.dir(), r.first_row + t, v);
  if (opt.profile) {
    opt.profile->lm_head_s += now_seconds() - t1;
    ++opt.profile->calls;
  }
  if (opt.want_hidden) r.hidden = std::move(hf);
  return r;
}

void NemotronH::accept(SequenceState& st, int64_t keep) const {
  const int64_t T = st.pending_rows_;
  if (T == 0) fail("accept: the last forward was not recorded (ForwardOptions::record)");
  if (keep < 1 || keep > T) fail("accept: keep = {} outside [1, {}]", keep, T);
  for (size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].kind == io::LayerKind::Mamba && keep < T) {
      const int s = st.mamba_slot_[i];
      mamba2_replay(std::get<Mamba2Weights>(layers_[i].mixer), st.journal_[s], keep, st.mamba_[s]);
    }
  st.n_past_ -= (T - keep);  // attention KV beyond n_past is dead and will be overwritten
  st.pending_rows_ = 0;
}

}  // namespace nemo::model
