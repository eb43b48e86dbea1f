// Routed relu² mixture of experts with a shared expert (Nemotron-H `E` layers), and the dense
// relu² MLP (`-` layers). nemotron_h.md §5.
#pragma once
#include <vector>

#include "base/threads.h"
#include "io/model_config.h"
#include "model/layout.h"
#include "model/weights.h"

namespace nemo::model {

struct MlpWeights {  // non-gated: down(relu(up(x))²)
  Linear up, down;
  static MlpWeights bind(const WeightBinder& b, const layout::Block& L);  // a dense `-` layer
};

struct MoEWeights {
  Linear gate;                         // router [E, H], computed in f32
  std::vector<float> correction_bias;  // [E] e_score_correction_bias: selection only
  std::vector<MlpWeights> experts;     // E routed experts
  std::vector<MlpWeights> shared;      // n_shared_experts (0 or 1)
  static MoEWeights bind(const WeightBinder& b, const layout::Block& L, const io::ModelConfig& c);
};

// The router's decision for one row: expert ids in ascending order and their final weights.
struct Routing {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};
// Sigmoid scores; top-k by (score + correction bias), ties to the lowest index; weights are the
// unbiased scores of the chosen experts, renormalised (norm_topk_prob), × routed_scaling_factor.
// With n_group > 1 the top-k is taken among the experts of the topk_group groups whose two best
// biased scores sum highest (group ties to the lowest group index). nemotron_h.md §5.2.
Routing route(const io::ModelConfig& c, const float* router_logits, const std::vector<float>& bias);

void mlp_forward(const MlpWeights& w, const float* x, int64_t T, int64_t x_stride, float* out,
                 int64_t out_stride, const ThreadConfig& tc);
// `used` (optional, resized to E): set to 1 for every expert a row was routed to.
void moe_forward(const MoEWeights& w, const io::ModelConfig& c, const float* hn, int64_t T,
                 float* out, const ThreadConfig& tc, std::vector<uint8_t>* used = nullptr);

}  // namespace nemo::model
