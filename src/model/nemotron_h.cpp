#include "model/nemotron_h.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/clock.h"
#include "base/error.h"
#include "kernels/ops.h"

namespace nemo::model {

NemotronH::NemotronH(io::ModelConfig cfg, io::TensorStore store, io::QuantConfig qc,
                     LoadOptions opt)
    : cfg_(std::move(cfg)), store_(std::move(store)), qc_(std::move(qc)), opt_(opt) {}

std::unique_ptr<NemotronH> NemotronH::load(const std::string& dir, const LoadOptions& opt) {
  io::ModelConfig cfg = io::load_model_config(dir);
  io::QuantConfig qc = io::load_quant_config(dir);
  io::TensorStore store = io::TensorStore::open_dir(dir);
  if (opt.no_mmap) store.make_resident();
  std::unique_ptr<NemotronH> m(new NemotronH(std::move(cfg), std::move(store), std::move(qc), opt));
  const auto& c = m->cfg_;
  WeightBinder b(m->store_, m->qc_, opt);
  m->prefix_ = layout::backbone_prefix([&](const std::string& n) { return b.has(n); });
  // Everything outside the layers (embeddings, norm_f, lm_head) from the layout's top-level
  // entries.
  const auto all = layout::target_tensors(c, {.prefix = m->prefix_, .mtp = false});
  for (const auto& s : all) {
    if (s.role == layout::Role::Embedding) m->embeddings_ = b.linear(s);
    if (s.role == layout::Role::FinalNorm) m->norm_f_ = b.values(s);
    if (s.role == layout::Role::LmHead) {
      if (b.has(s.tensor_name()))
        m->lm_head_ = b.linear(s);
      else if (c.tie_word_embeddings)
        m->lm_head_ = m->embeddings_;
      else
        fail("{}: missing tensor '{}' (tie_word_embeddings is false)", dir, s.tensor_name());
    }
  }
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const layout::Block L = layout::layer_block(c, c.layers[i], layout::layer_prefix(m->prefix_, i),
                                                layout::Part::Backbone, int(i));
    m->layers_.push_back(Layer::bind(b, L, c.layers[i], c));
  }
  return m;
}

int64_t NemotronH::weight_bytes() const {
  return int64_t(store_.total_bytes());
}

std::vector<NemotronH::MatmulCost> NemotronH::matmul_costs(
    const std::vector<std::vector<uint8_t>>& experts_used) const {
  using P = CostPart;
  const auto cost = [](const kernels::PackedWeight& w, P part) {
    return MatmulCost{w.bytes(), w.rows * w.cols, part};
  };
  std::vector<MatmulCost> c{cost(lm_head_, P::LmHead)};
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    if (const auto* m = std::get_if<Mamba2Weights>(&L.mixer))
      c.insert(c.end(), {cost(m->in_proj, P::Mamba), cost(m->out_proj, P::Mamba)});
    if (const auto* a = std::get_if<AttentionWeights>(&L.mixer))
      c.insert(c.end(), {cost(a->q_proj, P::Attention), cost(a->k_proj, P::Attention),
                         cost(a->v_proj, P::Attention), cost(a->o_proj, P::Attention)});
    if (const auto* p = std::get_if<MlpWeights>(&L.mixer))
      c.insert(c.end(), {cost(p->up, P::Mlp), cost(p->down, P::Mlp)});
    if (const auto* e = std::get_if<MoEWeights>(&L.mixer)) {
      c.push_back(cost(e->gate, P::MoE));
      for (const auto& x : e->shared) c.insert(c.end(), {cost(x.up, P::MoE), cost(x.down, P::MoE)});
      MatmulCost all{.part = P::MoE}, routed{.part = P::MoE};
      for (size_t x = 0; x < e->experts.size(); ++x) {
        const MatmulCost up = cost(e->experts[x].up, P::MoE),
                         down = cost(e->experts[x].down, P::MoE);
        all.bytes += up.bytes + down.bytes;
        all.macs_per_row += up.macs_per_row + down.macs_per_row;
        if (l < experts_used.size() && x < experts_used[l].size() && experts_used[l][x])
          routed.bytes += up.bytes + down.bytes;
      }
      const auto n = int64_t(e->experts.size()), k = int64_t(cfg_.num_experts_per_tok);
      routed.macs_per_row = all.macs_per_row / n * k;
      if (experts_used.empty()) routed.bytes = all.bytes / n * k;  // a decode step
      c.push_back(routed);
    }
  }
  return c;
}

int64_t NemotronH::bytes_read(const std::vector<std::vector<uint8_t>>& experts_used) const {
  int64_t b = embeddings_.bytes() / std::max<int64_t>(1, embeddings_.rows);
  for (const Layer& L : layers_) b += int64_t(L.norm_w.size()) * 2;
  for (const MatmulCost& c : matmul_costs(experts_used)) b += c.bytes;
  return b;
}

int64_t NemotronH::decode_bytes_per_token() const {
  return bytes_read({});
}

int64_t NemotronH::matmul_macs_per_row() const {
  int64_t n = 0;
  for (const MatmulCost& c : matmul_costs({})) n += c.macs_per_row;
  return n;
}

void NemotronH::embed(int32_t token, float* out) const {
  kernels::dequantize_row(embeddings_, token, out);
}

void NemotronH::logits_from_hidden(const float* hidden, int64_t n, float* logits,
                                   const ThreadConfig& tc) const {
  kernels::linear(lm_head_, hidden, n, cfg_.hidden_size, logits, cfg_.vocab_size, tc);
}

ForwardResult NemotronH::forward(SequenceState& st, std::span<const int32_t> tokens,
                                 const ForwardOptions& opt, const ThreadConfig& tc) const {
  const BatchItem one{&st, tokens, opt};
  return std::move(forward_batch(std::span(&one, 1), tc, opt.profile)[0]);
}

std::vector<ForwardResult> NemotronH::forward_batch(std::span<const BatchItem> items,
                                                    const ThreadConfig& tc,
                                                    ForwardProfile* profile) const {
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size, NL = int64_t(layers_.size());
  const size_t n = items.size();
  if (n == 0) fail("forward: no sequences");
  // Rows of all sequences back to back; one SeqRows (and one set of layer states) per sequence.
  std::vector<SeqRows> seqs(n);
  std::vector<std::vector<LayerState>> states(n, std::vector<LayerState>(layers_.size()));
  std::vector<int64_t> taps;  // union of the sequences' tap layers, ascending
  int64_t T = 0;
  for (size_t q = 0; q < n; ++q) {
    const BatchItem& it = items[q];
    SequenceState& st = *it.st;
    for (size_t p = 0; p < q; ++p)
      if (items[p].st == it.st) fail("forward_batch: one sequence state appears twice");
    const int64_t Tq = int64_t(it.tokens.size());
    if (Tq == 0) fail("forward: no tokens");
    for (int64_t t = 0; t < Tq; ++t)
      if (it.tokens[t] < 0 || it.tokens[t] >= V)
        fail("token id {} at position {} is outside the vocabulary [0, {})", it.tokens[t], t, V);
    for (auto L : it.opt.taps) {
      if (L < 0 || L >= NL) fail("tap layer {} is outside [0, {})", L, NL);
      if (std::find(taps.begin(), taps.end(), L) == taps.end()) taps.push_back(L);
    }
    st.pending_rows_ = 0;  // an unaccepted recorded round is implicitly accepted in full
    st.ensure_kv_capacity(st.n_past_ + Tq);
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (const int s = st.mamba_slot_[i]; s >= 0) {
        states[q][i].mamba = &st.mamba_[size_t(s)];
        if (it.opt.record) states[q][i].journal = &st.journal_[size_t(s)];
      }
      if (const int s = st.attn_slot_[i]; s >= 0) states[q][i].kv = &st.kv_[size_t(s)];
    }
    seqs[q] = {.row0 = T,
               .T = Tq,
               .n_past = st.n_past_,
               .mamba = {it.opt.record, it.opt.ssd_min_rows},
               .states = states[q]};
    T += Tq;
  }
  std::sort(taps.begin(), taps.end());

  // h = embed(tokens)
  Buffer<float> h(size_t(T * H));
  for (const SeqRows& sq : seqs)
    for (int64_t t = 0; t < sq.T; ++t)
      embed(items[size_t(&sq - seqs.data())].tokens[t], h.data() + (sq.row0 + t) * H);
  // h = layers(h)
  const int64_t NT = int64_t(taps.size());
  Buffer<float> tap_all(size_t(T * NT * H));
  forward_layers(
      layers_, cfg_, h.data(),
      {.T = T, .seqs = seqs, .profile = profile, .taps = taps, .tap_out = tap_all.data()}, tc);

  std::vector<ForwardResult> out(n);
  int64_t logit_rows = 0;
  for (size_t q = 0; q < n; ++q) {
    const BatchItem& it = items[q];
    const SeqRows& sq = seqs[q];
    ForwardResult& r = out[q];
    // This sequence's taps, in the order it asked for them.
    const int64_t nq = int64_t(it.opt.taps.size());
    if (nq) {
      r.taps.resize(size_t(sq.T * nq * H));
      for (int64_t k = 0; k < nq; ++k) {
        const int64_t u = std::find(taps.begin(), taps.end(), it.opt.taps[k]) - taps.begin();
        const bool post_norm = it.opt.tap_last_post_norm && it.opt.taps[k] + 1 == NL;
        for (int64_t t = 0; t < sq.T; ++t) {
          const float* src = tap_all.data() + ((sq.row0 + t) * NT + u) * H;
          float* row = r.taps.data() + (t * nq + k) * H;
          if (post_norm)
            kernels::rms_norm(src, norm_f_.data(), H, cfg_.norm_eps, row);
          else
            std::copy_n(src, H, row);
        }
      }
    }
    it.st->n_past_ = sq.n_past + sq.T;
    if (it.opt.record) it.st->pending_rows_ = sq.T;
    r.rows = it.opt.all_logits ? sq.T : 1;
    r.first_row = sq.T - r.rows;
    logit_rows += r.rows;
  }

  // logits = lm_head(norm_f(h)) for each sequence's last row, or all its rows: one matmul, into
  // the result itself when the pass has one sequence (no second 4 MB buffer and copy for a
  // verify pass of 8 rows).
  const double t1 = profile ? now_seconds() : 0.0;
  Buffer<float> hf(size_t(logit_rows * H)), shared;
  for (int64_t q = 0, at = 0; q < int64_t(n); ++q) {
    const ForwardResult& r = out[size_t(q)];
    for (int64_t t = 0; t < r.rows; ++t, ++at)
      kernels::rms_norm(h.data() + (seqs[size_t(q)].row0 + r.first_row + t) * H, norm_f_.data(), H,
                        cfg_.norm_eps, hf.data() + at * H);
  }
  Buffer<float>& logits = n == 1 ? out[0].logits : shared;
  logits.resize(size_t(logit_rows * V));
  logits_from_hidden(hf.data(), logit_rows, logits.data(), tc);
  for (int64_t q = 0, at = 0; q < int64_t(n); ++q) {
    ForwardResult& r = out[size_t(q)];
    if (n > 1) {
      r.logits.resize(size_t(r.rows * V));
      std::copy_n(logits.data() + at * V, r.rows * V, r.logits.data());
    }
    // A NaN or Inf weight (embedding row, projection) surfaces here: refuse to sample from it.
    if (const int64_t i = kernels::first_non_finite(r.logits.data(), r.rows * V); i >= 0)
      fail(
          "{}: non-finite logits (row {}, token id {}): the checkpoint holds NaN or Inf values on "
          "this path",
          store_.dir(), r.first_row + i / V, i % V);
    if (items[size_t(q)].opt.want_hidden) {
      r.hidden.resize(size_t(r.rows * H));
      std::copy_n(hf.data() + at * H, r.rows * H, r.hidden.data());
    }
    at += r.rows;
  }
  if (profile) {
    profile->lm_head_s += now_seconds() - t1;
    ++profile->calls;
  }
  return out;
}

void NemotronH::accept(SequenceState& st, int64_t keep, const ThreadConfig& tc) const {
  const int64_t T = st.pending_rows_;
  if (T == 0) fail("accept: the last forward was not recorded (ForwardOptions::record)");
  if (keep < 1 || keep > T) fail("accept: keep = {} outside [1, {}]", keep, T);
  for (size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].kind == io::LayerKind::Mamba && keep < T) {
      const int s = st.mamba_slot_[i];
      mamba2_replay(std::get<Mamba2Weights>(layers_[i].mixer), st.journal_[s], keep, st.mamba_[s],
                    tc);
    }
  st.n_past_ -= (T - keep);  // attention KV beyond n_past is dead and will be overwritten
  st.pending_rows_ = 0;
}

}  // namespace nemo::model
