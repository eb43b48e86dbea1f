#include "model/dflash.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>

#include "base/error.h"
#include "io/model_config.h"
#include "kernels/ops.h"
#include "model/layout.h"

namespace nemo::model {

using layout::Role;

size_t DraftContext::bytes() const {
  size_t b = 0;
  for (size_t l = 0; l < k.size(); ++l) b += k[l].bytes() + v[l].bytes();
  return b;
}

DFlashModel::DFlashModel(const NemotronH& target, io::DrafterConfig cfg, io::TensorStore store,
                         io::QuantConfig qc, DraftLoadOptions opt)
    : target_(target),
      cfg_(std::move(cfg)),
      store_(std::move(store)),
      qc_(std::move(qc)),
      opt_(opt) {}

namespace {

// The pair checks of `inspect --draft`, as load errors: one line naming the field each.
void check_pair(const std::string& dir, const io::DrafterConfig& d, const io::ModelConfig& t) {
  if (d.kind.empty())
    fail(
        "{}: not a DFlash / DSpark drafter (architectures \"{}\", no dflash_config or Markov head)",
        dir, d.architecture);
  for (const auto& [key, v] : {std::pair{"hidden_size", d.hidden_size},
                               {"num_hidden_layers", d.layers},
                               {"vocab_size", d.vocab_size},
                               {"num_attention_heads", d.num_attention_heads},
                               {"num_key_value_heads", d.num_key_value_heads},
                               {"head_dim", d.head_dim},
                               {"intermediate_size", d.intermediate_size}})
    if (v <= 0) fail("{}: config.json: missing or invalid '{}'", dir, key);
  if (d.head_dim % 2 || d.num_attention_heads % d.num_key_value_heads)
    fail(
        "{}: config.json: head_dim {} must be even and num_attention_heads {} a multiple of "
        "num_key_value_heads {}",
        dir, d.head_dim, d.num_attention_heads, d.num_key_value_heads);
  if (d.vocab_size != t.vocab_size)
    fail("{}: drafter vocab_size {} does not match the target's {}", dir, d.vocab_size,
         t.vocab_size);
  if (d.hidden_size != t.hidden_size)
    fail(
        "{}: drafter hidden_size {} does not match the target's {} (its rows go through the "
        "target's lm_head)",
        dir, d.hidden_size, t.hidden_size);
  if (d.target_hidden_size && *d.target_hidden_size != t.hidden_size)
    fail("{}: drafter target_hidden_size {} does not match the target's hidden size {}", dir,
         *d.target_hidden_size, t.hidden_size);
  if (d.target_layer_ids.empty())
    fail("{}: config.json: no target layer ids (dflash_config.target_layer_ids)", dir);
  for (auto L : d.target_layer_ids)
    if (L < 0 || L >= int64_t(t.layers.size()))
      fail("{}: target layer id {} ({}) is outside the target's {} layers", dir, L,
           d.target_layer_ids_source, t.layers.size());
  if (!d.mask_token_id)
    fail("{}: config.json: no mask_token_id (dflash_config.mask_token_id)", dir);
  if (*d.mask_token_id < 0 || *d.mask_token_id >= t.vocab_size)
    fail("{}: mask_token_id {} is outside the vocabulary [0, {})", dir, *d.mask_token_id,
         t.vocab_size);
  if (d.block_size && *d.block_size < 2)
    fail("{}: block_size {} must be at least 2", dir, *d.block_size);
}

// W4A16 NVFP4 or 16/32-bit float: what NVIDIA ships and the engine runs for drafters.
void check_format(const std::string& dir, const std::string& module, const Linear& w) {
  using kernels::WeightFormat;
  if (w.format == WeightFormat::FP8_E4M3 || w.format == WeightFormat::AFFINE4 ||
      w.format == WeightFormat::AFFINE8)
    fail("{}: drafter module '{}' is {}; drafters run as W4A16 NVFP4 or bf16/f16/f32", dir, module,
         kernels::weight_format_name(w.format));
}

}  // namespace

std::unique_ptr<DFlashModel> DFlashModel::load(const std::string& dir, const NemotronH& target,
                                               const DraftLoadOptions& opt) {
  const io::DrafterConfig cfg = io::parse_drafter_config(io::read_config_json(dir));
  check_pair(dir, cfg, target.config());
  io::QuantConfig qc = io::load_quant_config(dir);
  if (qc.format == io::QuantFormat::Mlx)
    fail("{}: MLX-quantized drafters are not supported (expected W4A16 NVFP4 or bf16)", dir);
  io::TensorStore store = io::TensorStore::open_dir(dir);
  std::unique_ptr<DFlashModel> m(
      new DFlashModel(target, cfg, std::move(store), std::move(qc), opt));
  const io::DrafterConfig& c = m->cfg_;
  // The drafter multiplies as its target does (--arith): one switch per run.
  WeightBinder b(m->store_, m->qc_, {.packed_arith = target.load_options().packed_arith});
  const std::string P = b.has("model.layers.0.input_layernorm.weight") ? "model." : "";
  auto lin = [&](const layout::TensorSpec& s) {
    Linear w = b.linear(s);
    check_format(dir, s.name, w);
    return w;
  };
  m->layers_.resize(size_t(c.layers));
  for (const auto& s : layout::drafter_tensors(c, P)) {
    Layer* L = s.layer >= 0 ? &m->layers_[size_t(s.layer)] : nullptr;
    switch (s.role) {
      case Role::DraftEmbed:
        m->embed_ = lin(s), m->own_embed_ = true;
        break;
      case Role::DraftFc:
        m->fc_ = lin(s);
        break;
      case Role::DraftHiddenNorm:
        m->hidden_norm_ = b.values(s);
        break;
      case Role::DraftNorm:
        m->norm_ = b.values(s);
        break;
      case Role::DraftLmHead:
        break;  // the target's lm_head is used (§3.5); a shipped one is ignored
      case Role::DraftInputNorm:
        L->input_norm = b.values(s);
        break;
      case Role::DraftPostAttnNorm:
        L->post_norm = b.values(s);
        break;
      case Role::DraftQ:
        L->q = lin(s);
        break;
      case Role::DraftK:
        L->k = lin(s);
        break;
      case Role::DraftV:
        L->v = lin(s);
        break;
      case Role::DraftO:
        L->o = lin(s);
        break;
      case Role::DraftQNorm:
        L->q_norm = b.values(s);
        break;
      case Role::DraftKNorm:
        L->k_norm = b.values(s);
        break;
      case Role::DraftSink:
        L->sink = b.values(s);
        break;
      case Role::DraftGate:
        L->gate = lin(s);
        break;
      case Role::DraftUp:
        L->up = lin(s);
        break;
      case Role::DraftDown:
        L->down = lin(s);
        break;
      case Role::MarkovW1:
        m->markov_w1_ = lin(s), m->has_markov_ = true;
        break;
      case Role::MarkovW2:
        m->markov_w2_ = lin(s);
        break;
      default:
        fail("{}: unexpected drafter tensor role {}", dir, layout::role_name(s.role));
    }
  }
  m->block_ =
      c.block_size.value_or(8);  // DFlash ships no block_size; its trained block is 8 (§1.4, §9.3)
  m->window_ = c.use_swa ? c.sliding_window.value_or(1024) : 0;
  // RoPE frequencies, plain or YaRN (§1.5), in double.
  const int64_t half = c.head_dim / 2;
  const double d = double(c.head_dim), theta = c.rope_theta;
  m->inv_freq_.resize(size_t(half));
  double low = 0, high = 0;
  if (c.rope_yarn) {
    const double two_pi = 2.0 * std::numbers::pi;
    low = std::floor(d * std::log(c.yarn_original_max / (c.yarn_beta_fast * two_pi)) /
                     (2.0 * std::log(theta)));
    high = std::ceil(d * std::log(c.yarn_original_max / (c.yarn_beta_slow * two_pi)) /
                     (2.0 * std::log(theta)));
    low = std::max(low, 0.0), high = std::min(high, d - 1);
    if (high == low) high += 0.001;
    m->mscale_ = c.yarn_factor > 1.0 ? 0.1 * std::log(c.yarn_factor) + 1.0 : 1.0;
  }
  for (int64_t i = 0; i < half; ++i) {
    const double extrap = 1.0 / std::pow(theta, 2.0 * double(i) / d);
    if (!c.rope_yarn) {
      m->inv_freq_[size_t(i)] = extrap;
      continue;
    }
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    m->inv_freq_[size_t(i)] = extrap / c.yarn_factor * ramp + extrap * (1.0 - ramp);
  }
  return m;
}

DraftContext DFlashModel::new_context() const {
  DraftContext ctx;
  ctx.k.resize(layers_.size());
  ctx.v.resize(layers_.size());
  return ctx;
}

void DFlashModel::rope(int64_t pos, float* c, float* s) const {
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const double a = double(pos) * inv_freq_[i];
    c[i] = float(std::cos(a) * mscale_);
    s[i] = float(std::sin(a) * mscale_);
  }
}

void DFlashModel::rope_rows(float* x, int64_t heads, int64_t pos) const {
  const int64_t hd = cfg_.head_dim, half = hd / 2;
  std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  rope(pos, c.data(), s.data());
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * hd;
    for (int64_t i = 0; i < half;
         ++i) {  // x·cos + rotate_half(x)·sin, rotate_half([a, b]) = [−b, a]
      const float a = v[i], b = v[i + half];
      v[i] = a * c[size_t(i)] - b * s[size_t(i)];
      v[i + half] = b * c[size_t(i)] + a * s[size_t(i)];
    }
  }
}

void DFlashModel::head_norm(float* x, int64_t heads, const std::vector<float>& w) const {
  for (int64_t h = 0; h < heads; ++h)
    kernels::rms_norm(x + h * cfg_.head_dim, w.data(), cfg_.head_dim, float(cfg_.rms_norm_eps),
                      x + h * cfg_.head_dim);
}

void DFlashModel::append_context(DraftContext& ctx, const float* taps, int64_t n,
                                 const ThreadConfig& tc) const {
  if (n <= 0) return;
  const int64_t H = cfg_.hidden_size, F = fc_.cols, KW = cfg_.num_key_value_heads * cfg_.head_dim;
  // A sliding-window drafter never looks further back than its window: skip older rows.
  const int64_t skip = window_ > 0 ? std::max<int64_t>(0, n - window_) : 0;
  const int64_t rows = n - skip, pos0 = ctx.n + skip;
  const int64_t need = window_ > 0 ? window_ : ctx.n + n;
  if (need > ctx.capacity) {  // full attention: grow by doubling, keeping the rows so far
    const int64_t cap = window_ > 0 ? window_ : std::max<int64_t>(need, 2 * ctx.capacity);
    for (size_t l = 0; l < layers_.size(); ++l)
      for (Buffer<float>* b : {&ctx.k[l], &ctx.v[l]}) {
        Buffer<float> nb(size_t(cap * KW));
        if (ctx.n > 0 && window_ == 0) std::copy_n(b->data(), size_t(ctx.n * KW), nb.data());
        *b = std::move(nb);
      }
    ctx.capacity = cap;
  }
  // c = RMSNorm(fc · taps, hidden_norm)
  Buffer<float> c(size_t(rows * H)), kr(size_t(rows * KW)), vr(size_t(rows * KW));
  kernels::linear(fc_, taps + skip * F, rows, F, c.data(), H, tc);
  for (int64_t t = 0; t < rows; ++t)
    kernels::rms_norm(c.data() + t * H, hidden_norm_.data(), H, float(cfg_.rms_norm_eps),
                      c.data() + t * H);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    // K = RoPE(k_norm(Wk c), j) and V = Wv c for all rows at once (each weight read once), then
    // written at slot j (mod the window: ring slots need not be contiguous).
    kernels::linear(L.k, c.data(), rows, H, kr.data(), KW, tc);
    kernels::linear(L.v, c.data(), rows, H, vr.data(), KW, tc);
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t j = pos0 + t, slot = window_ > 0 ? j % window_ : j;
      float* kd = ctx.k[l].data() + slot * KW;
      std::copy_n(kr.data() + t * KW, KW, kd);
      head_norm(kd, cfg_.num_key_value_heads, L.k_norm);
      rope_rows(kd, cfg_.num_key_value_heads, j);
      std::copy_n(vr.data() + t * KW, KW, ctx.v[l].data() + slot * KW);
    }
  }
  ctx.n += n;
}

void DFlashModel::block_hidden(const DraftContext& ctx, int32_t anchor, int64_t Q, float* out,
                               const ThreadConfig& tc) const {
  const int64_t H = cfg_.hidden_size, HQ = cfg_.num_attention_heads, HKV = cfg_.num_key_value_heads,
                hd = cfg_.head_dim, QW = HQ * hd, KW = HKV * hd, F = cfg_.intermediate_size,
                p = ctx.n;
  const float eps = float(cfg_.rms_norm_eps), scale = 1.0f / std::sqrt(float(hd));
  if (Q < 1) fail("drafter block of {} rows", Q);
  // x = embed([anchor, MASK, ...]) with the drafter's own table (§1.4)
  Buffer<float> x(size_t(Q * H)), h(size_t(Q * H)), q(size_t(Q * QW)), k(size_t(Q * KW)),
      v(size_t(Q * KW)), att(size_t(Q * QW)), o(size_t(Q * H)), g(size_t(Q * F)), u(size_t(Q * F));
  for (int64_t i = 0; i < Q; ++i) {
    const int32_t tok = i == 0 ? anchor : int32_t(*cfg_.mask_token_id);
    if (own_embed_)
      kernels::dequantize_row(embed_, tok, x.data() + i * H);
    else
      target_.embed(tok, x.data() + i * H);
  }
  const bool causal = cfg_.causal;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    // h = RMSNorm(x, input_layernorm); q, k per head RMSNorm + RoPE at p+i; v
    for (int64_t i = 0; i < Q; ++i)
      kernels::rms_norm(x.data() + i * H, L.input_norm.data(), H, eps, h.data() + i * H);
    kernels::linear(L.q, h.data(), Q, H, q.data(), QW, tc);
    kernels::linear(L.k, h.data(), Q, H, k.data(), KW, tc);
    kernels::linear(L.v, h.data(), Q, H, v.data(), KW, tc);
    for (int64_t i = 0; i < Q; ++i) {
      head_norm(q.data() + i * QW, HQ, L.q_norm);
      rope_rows(q.data() + i * QW, HQ, p + i);
      head_norm(k.data() + i * KW, HKV, L.k_norm);
      rope_rows(k.data() + i * KW, HKV, p + i);
    }
    // Attention of row i, head hq over the allowed context positions, then the allowed block rows:
    // DFlash every context row and every block row; DSpark context j > p+i−W and block rows m ≤ i,
    // with the head's sink logit in the normaliser (§3.2).
    parallel_for(tc, Q * HQ, 1, [&](int64_t a, int64_t b) {
      std::vector<float> s;
      for (int64_t it = a; it < b; ++it) {
        const int64_t i = it / HQ, hq = it % HQ, g_kv = hq / (HQ / HKV);
        const float* qi = q.data() + i * QW + hq * hd;
        const int64_t j0 = window_ > 0 ? std::max<int64_t>(0, p + i - window_ + 1) : 0;
        const int64_t m1 = causal ? i + 1 : Q;
        s.clear();
        auto ctx_row = [&](const std::vector<Buffer<float>>& kv, int64_t j) {
          return kv[l].data() + (window_ > 0 ? j % window_ : j) * KW + g_kv * hd;
        };
        for (int64_t j = j0; j < p; ++j)
          s.push_back(kernels::dot(qi, ctx_row(ctx.k, j), hd) * scale);
        for (int64_t m = 0; m < m1; ++m)
          s.push_back(kernels::dot(qi, k.data() + m * KW + g_kv * hd, hd) * scale);
        const bool sink = !L.sink.empty();
        float mx = sink ? L.sink[size_t(hq)] : -INFINITY;
        for (float e : s) mx = std::max(mx, e);
        float den = sink ? std::exp(L.sink[size_t(hq)] - mx) : 0.0f;
        for (float& e : s) {
          e = std::exp(e - mx);
          den += e;
        }
        float* oi = att.data() + i * QW + hq * hd;
        std::fill(oi, oi + hd, 0.0f);
        size_t n = 0;
        for (int64_t j = j0; j < p; ++j) kernels::axpy(s[n++] / den, ctx_row(ctx.v, j), oi, hd);
        for (int64_t m = 0; m < m1; ++m)
          kernels::axpy(s[n++] / den, v.data() + m * KW + g_kv * hd, oi, hd);
      }
    });
    // x += o_proj(attention)
    kernels::linear(L.o, att.data(), Q, QW, o.data(), H, tc);
    for (int64_t e = 0; e < Q * H; ++e) x[e] = x[e] + o[e];
    // x += down(silu(gate h2) · up h2), h2 = RMSNorm(x, post_attention_layernorm)
    for (int64_t i = 0; i < Q; ++i)
      kernels::rms_norm(x.data() + i * H, L.post_norm.data(), H, eps, h.data() + i * H);
    kernels::linear(L.gate, h.data(), Q, H, g.data(), F, tc);
    kernels::linear(L.up, h.data(), Q, H, u.data(), F, tc);
    kernels::silu_mul(g.data(), u.data(), Q * F);
    kernels::linear(L.down, g.data(), Q, F, o.data(), H, tc);
    for (int64_t e = 0; e < Q * H; ++e) x[e] = x[e] + o[e];
  }
  // z = RMSNorm(x, norm) for the rows that draft
  for (int64_t i = first_slot(); i < Q; ++i)
    kernels::rms_norm(x.data() + i * H, norm_.data(), H, eps, out + (i - first_slot()) * H);
}

int64_t DFlashModel::round_bytes(int64_t k) const {
  int64_t b = target_.lm_head_bytes() + fc_.bytes();
  for (const Layer& L : layers_)
    b += L.q.bytes() + L.k.bytes() + L.v.bytes() + L.o.bytes() + L.gate.bytes() + L.up.bytes() +
         L.down.bytes() + L.k.bytes() + L.v.bytes();  // the context append reads K and V again
  if (has_markov_) b += k * markov_w2_.bytes();
  return b;
}

void DFlashModel::markov_bias(int32_t prev, float* out, const ThreadConfig& tc) const {
  if (!has_markov_) return;
  std::vector<float> w1(size_t(markov_w1_.cols));
  kernels::dequantize_row(markov_w1_, prev, w1.data());
  kernels::linear(markov_w2_, w1.data(), 1, markov_w1_.cols, out, markov_w2_.rows, tc);
}

}  // namespace nemo::model
