#include "model/layer.h"

#include <algorithm>

#include "base/clock.h"
#include "base/error.h"
#include "kernels/ops.h"

namespace nemo::model {

Layer Layer::bind(const WeightBinder& b, const layout::Block& L, io::LayerKind kind,
                  const io::ModelConfig& c) {
  Layer layer{kind, b.values(L.at(layout::Role::LayerNorm)), MlpWeights{}};
  switch (kind) {
    case io::LayerKind::Mamba:
      layer.mixer = Mamba2Weights::bind(b, L, c);
      break;
    case io::LayerKind::Attention:
      layer.mixer = AttentionWeights::bind(b, L);
      break;
    case io::LayerKind::MoE:
      layer.mixer = MoEWeights::bind(b, L, c);
      break;
    case io::LayerKind::MLP:
      layer.mixer = MlpWeights::bind(b, L);
      break;
  }
  return layer;
}

void forward_layers(std::span<const Layer> layers, const io::ModelConfig& c, float* h,
                    const LayerPass& pass, const ThreadConfig& tc) {
  const int64_t T = pass.T, H = c.hidden_size;
  Buffer<float> hn(size_t(T * H)), o(size_t(T * H));
  ForwardProfile* prof = pass.profile;
  double t_mark = prof ? now_seconds() : 0.0;
  auto charge = [&](double ForwardProfile::*slot) {
    if (!prof) return;
    const double t = now_seconds();
    prof->*slot += t - t_mark;
    t_mark = t;
  };
  std::vector<MambaSeq> mamba_seqs(pass.seqs.size());
  std::vector<AttnSeq> attn_seqs(pass.seqs.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& L = layers[i];
    // hn = rms_norm(h)
    for (int64_t t = 0; t < T; ++t)
      kernels::rms_norm(h + t * H, L.norm_w.data(), H, c.norm_eps, hn.data() + t * H);
    charge(&ForwardProfile::norms_s);
    // o = mixer(hn)
    switch (L.kind) {
      case io::LayerKind::Mamba:
        for (size_t q = 0; q < pass.seqs.size(); ++q) {
          const SeqRows& sq = pass.seqs[q];
          mamba_seqs[q] = {sq.row0, sq.T, sq.states[i].mamba, sq.states[i].journal, sq.mamba};
        }
        mamba2_forward(std::get<Mamba2Weights>(L.mixer), hn.data(), T, o.data(), mamba_seqs, tc);
        charge(&ForwardProfile::mamba_s);
        break;
      case io::LayerKind::Attention:
        for (size_t q = 0; q < pass.seqs.size(); ++q) {
          const SeqRows& sq = pass.seqs[q];
          attn_seqs[q] = {sq.row0, sq.T, sq.n_past, sq.states[i].kv};
        }
        attention_forward(std::get<AttentionWeights>(L.mixer), c, hn.data(), T, attn_seqs,
                          o.data(), tc);
        charge(&ForwardProfile::attention_s);
        break;
      case io::LayerKind::MoE:
        if (prof && prof->experts_used.size() < layers.size())
          prof->experts_used.resize(layers.size());
        moe_forward(std::get<MoEWeights>(L.mixer), c, hn.data(), T, o.data(), tc,
                    prof ? &prof->experts_used[i] : nullptr);
        charge(&ForwardProfile::moe_s);
        break;
      case io::LayerKind::MLP:
        mlp_forward(std::get<MlpWeights>(L.mixer), hn.data(), T, H, o.data(), H, tc);
        charge(&ForwardProfile::mlp_s);
        break;
    }
    // h = h + o
    for (int64_t k = 0; k < T * H; ++k) h[k] = h[k] + o[k];
    for (size_t k = 0; k < pass.taps.size(); ++k)
      if (pass.taps[k] == int64_t(i))
        for (int64_t t = 0; t < T; ++t)
          std::copy_n(h + t * H, H, pass.tap_out + (t * int64_t(pass.taps.size()) + int64_t(k)) * H);
  }
}

}  // namespace nemo::model
