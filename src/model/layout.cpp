#include "model/layout.h"

#include "base/error.h"

namespace nemo::model::layout {

using io::LayerKind;

const char* role_name(Role r) {
  // clang-format off
  static constexpr const char* kNames[] = {
      "embedding", "final_norm", "lm_head", "layer_norm",
      "mamba_in_proj", "mamba_conv", "mamba_conv_bias", "mamba_dt_bias", "mamba_A_log", "mamba_D", "mamba_norm",
      "mamba_out_proj",
      "attn_q", "attn_k", "attn_v", "attn_o",
      "router", "router_bias", "expert_up", "expert_down", "shared_up", "shared_down",
      "mlp_up", "mlp_down",
      "mtp_enorm", "mtp_hnorm", "mtp_eh_proj", "mtp_final_norm",
      "draft_embed", "draft_fc", "draft_hidden_norm", "draft_norm", "draft_lm_head", "draft_input_norm",
      "draft_post_attention_norm", "draft_q", "draft_k", "draft_v", "draft_o", "draft_q_norm", "draft_k_norm",
      "draft_sink", "draft_gate", "draft_up", "draft_down", "markov_w1", "markov_w2"};
  // clang-format on
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == size_t(Role::MarkovW2) + 1);
  return kNames[size_t(r)];
}

std::vector<std::vector<int64_t>> TensorSpec::accepted_shapes() const {
  if (kind == Kind::Conv) {  // HF [C, 1, K]; MLX [C, K, 1]; squeezed [C, K]
    const int64_t C = shape[0], K = shape[2];
    return {{C, 1, K}, {C, K, 1}, {C, K}};
  }
  return {shape};
}

const TensorSpec* Block::find(Role r, int index) const {
  for (const auto& s : specs_)
    if (s.role == r && s.index == index) return &s;
  return nullptr;
}

const TensorSpec& Block::at(Role r, int index) const {
  const TensorSpec* s = find(r, index);
  if (!s)
    fail("layout: block has no tensor with role {}{}", role_name(r),
         index >= 0 ? fmt::format(" #{}", index) : "");
  return *s;
}

std::string layer_prefix(const std::string& backbone_prefix, size_t i) {
  return backbone_prefix + "layers." + std::to_string(i);
}
std::string mtp_prefix(size_t sublayer) {
  return "mtp.layers." + std::to_string(sublayer);
}

namespace {

// Appends entries of one block; every entry shares the block's part and layer index.
struct Builder {
  std::vector<TensorSpec>& out;
  Part part;
  int layer;
  void linear(Role r, std::string module, int64_t rows, int64_t cols, int index = -1) {
    out.push_back({std::move(module), r, Kind::Linear, part, {rows, cols}, layer, index});
  }
  void vector(Role r, std::string name, int64_t n, bool f32 = false, bool required = true) {
    out.push_back({std::move(name), r, Kind::Vector, part, {n}, layer, -1, required, f32});
  }
  void conv(Role r, std::string name, int64_t channels, int64_t taps) {
    out.push_back({std::move(name), r, Kind::Conv, part, {channels, 1, taps}, layer});
  }
};

// nemotron_h.md §3.1: in_proj → z | xBC | dt; causal conv over xBC; A = −exp(A_log); gated norm;
// out_proj.
void mamba2(Builder& b, const std::string& p, const io::ModelConfig& c) {
  const int64_t H = c.hidden_size, NH = c.mamba_num_heads;
  b.linear(Role::MambaInProj, p + ".in_proj", c.in_proj_dim(), H);
  b.conv(Role::MambaConv, p + ".conv1d.weight", c.conv_dim(), c.conv_kernel);
  if (c.use_conv_bias) b.vector(Role::MambaConvBias, p + ".conv1d.bias", c.conv_dim());
  b.vector(Role::MambaDtBias, p + ".dt_bias", NH, true);
  b.vector(Role::MambaALog, p + ".A_log", NH, true);
  b.vector(Role::MambaD, p + ".D", NH, true);
  b.vector(Role::MambaNorm, p + ".norm.weight", c.mamba_inner());
  b.linear(Role::MambaOutProj, p + ".out_proj", H, c.mamba_inner());
}

// nemotron_h.md §4: GQA projections without bias or positional encoding.
void attention(Builder& b, const std::string& p, const io::ModelConfig& c) {
  const int64_t H = c.hidden_size, QW = c.num_attention_heads * c.head_dim,
                KW = c.num_key_value_heads * c.head_dim;
  b.linear(Role::AttnQ, p + ".q_proj", QW, H);
  b.linear(Role::AttnK, p + ".k_proj", KW, H);
  b.linear(Role::AttnV, p + ".v_proj", KW, H);
  b.linear(Role::AttnO, p + ".o_proj", H, QW);
}

// nemotron_h.md §5.1: router (+ selection bias, zero when absent), E routed relu² experts, the
// shared expert.
void moe(Builder& b, const std::string& p, const io::ModelConfig& c) {
  const int64_t H = c.hidden_size, E = c.n_routed_experts, F = c.moe_intermediate_size;
  b.linear(Role::Router, p + ".gate", E, H);
  b.vector(Role::RouterBias, p + ".gate.e_score_correction_bias", E, true, /*required=*/false);
  for (int64_t e = 0; e < E; ++e) {
    const std::string ep = p + ".experts." + std::to_string(e);
    b.linear(Role::ExpertUp, ep + ".up_proj", F, H, int(e));
    b.linear(Role::ExpertDown, ep + ".down_proj", H, F, int(e));
  }
  if (c.n_shared_experts > 0) {
    const int64_t FS = c.moe_shared_expert_intermediate_size * c.n_shared_experts;
    b.linear(Role::SharedUp, p + ".shared_experts.up_proj", FS, H);
    b.linear(Role::SharedDown, p + ".shared_experts.down_proj", H, FS);
  }
}

void mlp(Builder& b, const std::string& p, const io::ModelConfig& c) {
  b.linear(Role::MlpUp, p + ".up_proj", c.intermediate_size, c.hidden_size);
  b.linear(Role::MlpDown, p + ".down_proj", c.hidden_size, c.intermediate_size);
}

void mixer(Builder& b, LayerKind kind, const std::string& mp, const io::ModelConfig& c) {
  switch (kind) {
    case LayerKind::Mamba:
      mamba2(b, mp, c);
      break;
    case LayerKind::Attention:
      attention(b, mp, c);
      break;
    case LayerKind::MoE:
      moe(b, mp, c);
      break;
    case LayerKind::MLP:
      mlp(b, mp, c);
      break;
  }
}

}  // namespace

Block layer_block(const io::ModelConfig& c, LayerKind kind, const std::string& lp, Part part,
                  int layer) {
  std::vector<TensorSpec> v;
  Builder b{v, part, layer};
  const int64_t H = c.hidden_size;
  // One MTP module flattened as mtp.layers.{0..n-1} (nemotron_h.md §6.1): the fusion
  // (enorm, hnorm, eh_proj over [enorm(e); hnorm(h)]) on the first sub-layer, the final norm on the
  // last.
  const bool mtp = part == Part::Mtp;
  if (mtp && layer == 0) {
    b.vector(Role::MtpENorm, lp + ".enorm.weight", H);
    b.vector(Role::MtpHNorm, lp + ".hnorm.weight", H);
    b.linear(Role::MtpEhProj, lp + ".eh_proj", H, 2 * H);
  }
  b.vector(Role::LayerNorm, lp + ".norm.weight", H);
  mixer(b, kind, lp + ".mixer", c);
  if (mtp && size_t(layer) + 1 == c.mtp_layers.size())
    b.vector(Role::MtpFinalNorm, lp + ".final_layernorm.weight", H);
  return Block(std::move(v));
}

std::vector<TensorSpec> target_tensors(const io::ModelConfig& c, const TargetOptions& opt) {
  const int64_t H = c.hidden_size, V = c.vocab_size;
  std::vector<TensorSpec> v;
  Builder top{v, Part::Backbone, -1};
  top.linear(Role::Embedding, opt.prefix + "embeddings", V, H);
  auto append = [&v](const Block& b) { v.insert(v.end(), b.specs().begin(), b.specs().end()); };
  for (size_t i = 0; i < c.layers.size(); ++i)
    append(layer_block(c, c.layers[i], layer_prefix(opt.prefix, i), Part::Backbone, int(i)));
  top.vector(Role::FinalNorm, opt.prefix + "norm_f.weight", H);
  top.linear(Role::LmHead, "lm_head", V, H);
  v.back().required = !c.tie_word_embeddings;  // tied: the embedding table is the head
  if (opt.mtp && c.num_nextn_predict_layers > 0)
    for (size_t s = 0; s < c.mtp_layers.size(); ++s)
      append(layer_block(c, c.mtp_layers[s], mtp_prefix(s), Part::Mtp, int(s)));
  return v;
}

std::vector<TensorSpec> drafter_tensors(const io::DrafterConfig& d, const std::string& P) {
  const int64_t H = d.hidden_size, V = d.vocab_size, QW = d.num_attention_heads * d.head_dim,
                KW = d.num_key_value_heads * d.head_dim, TH = d.target_hidden_size.value_or(H);
  const bool spark = d.kind == "dspark";
  std::vector<TensorSpec> v;
  Builder top{v, Part::Drafter, -1};
  if (d.has_embed_tokens) top.linear(Role::DraftEmbed, P + "embed_tokens", V, H);
  // fc fuses the concatenated target taps [h_tap0; h_tap1; ...] into the drafter's width.
  top.linear(Role::DraftFc, P + "fc", H, int64_t(d.target_layer_ids.size()) * TH);
  top.vector(Role::DraftHiddenNorm, P + "hidden_norm.weight", H);
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string lp = P + "layers." + std::to_string(i);
    Builder b{v, Part::Drafter, int(i)};
    b.vector(Role::DraftInputNorm, lp + ".input_layernorm.weight", H);
    b.linear(Role::DraftQ, lp + ".self_attn.q_proj", QW, H);
    b.linear(Role::DraftK, lp + ".self_attn.k_proj", KW, H);
    b.linear(Role::DraftV, lp + ".self_attn.v_proj", KW, H);
    b.linear(Role::DraftO, lp + ".self_attn.o_proj", H, QW);
    b.vector(Role::DraftQNorm, lp + ".self_attn.q_norm.weight", d.head_dim);
    b.vector(Role::DraftKNorm, lp + ".self_attn.k_norm.weight", d.head_dim);
    if (spark && d.attention_sink_bias)  // a learned sink logit per head (dflash_dspark.md §3.2)
      b.vector(Role::DraftSink, lp + ".self_attn.attention_sink_bias", d.num_attention_heads, true);
    b.vector(Role::DraftPostAttnNorm, lp + ".post_attention_layernorm.weight", H);
    b.linear(Role::DraftGate, lp + ".mlp.gate_proj", d.intermediate_size, H);
    b.linear(Role::DraftUp, lp + ".mlp.up_proj", d.intermediate_size, H);
    b.linear(Role::DraftDown, lp + ".mlp.down_proj", H, d.intermediate_size);
  }
  top.vector(Role::DraftNorm, P + "norm.weight", H);
  if (d.has_lm_head) top.linear(Role::DraftLmHead, "lm_head", V, H);
  if (spark &&
      d.markov_rank) {  // rank-r Markov head: logits += W2 · W1[prev] (dflash_dspark.md §3.1)
    top.linear(Role::MarkovW1, P + "markov_head.markov_w1", V, *d.markov_rank);
    top.linear(Role::MarkovW2, P + "markov_head.markov_w2", V, *d.markov_rank);
  }
  return v;
}

std::optional<StackedAlias> stacked_alias(const TensorSpec& s, int64_t n_experts) {
  if (s.role != Role::ExpertUp && s.role != Role::ExpertDown) return std::nullopt;
  const size_t at = s.name.rfind(".experts.");
  if (at == std::string::npos) return std::nullopt;
  return StackedAlias{
      s.name.substr(0, at) + (s.role == Role::ExpertUp ? ".switch_mlp.fc1" : ".switch_mlp.fc2"),
      s.index, n_experts};
}

}  // namespace nemo::model::layout
