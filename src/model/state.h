// Per-sequence state of a Nemotron-H model: attention KV caches and Mamba conv + SSM states.
//
// Speculative verification runs 1+γ rows with `record = true`, then keeps only the first a+1:
// NemotronH::accept(state, a+1) truncates the KV caches and rebuilds the Mamba states exactly as
// if only those rows had run, by replaying the recorded per-row recurrence inputs from the
// pre-round state (no matmul is re-run). See docs/ARCHITECTURE.md "Rollback".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/memory.h"
#include "io/model_config.h"

namespace nemo::model {

struct MambaState {
  Buffer<float> conv;  // [K-1, CD] raw (pre-conv) xBC rows, oldest first
  Buffer<float> ssm;   // [NH, P, N] f32
};

// What a recorded forward keeps per Mamba layer to rebuild any prefix of its rows.
struct MambaJournal {
  Buffer<float> conv0, ssm0;  // state before the round
  Buffer<float> xbc;          // [T, CD] pre-conv inputs
  Buffer<float> x, B, dt;     // [T, DI], [T, G*N], [T, NH] recurrence inputs (post conv/softplus)
};

// Storage type of the attention KV cache. F32 is exact; BF16 halves it; FP8 (E4M3) quarters it,
// scaled by the checkpoint's per-layer k_scale / v_scale (formats.md §3.5). Values are converted on
// write and widened to f32 on read, element by element, so batch invariance is unaffected.
enum class KvDtype : uint8_t { F32, BF16, FP8 };
KvDtype parse_kv_dtype(const std::string& s);  // f32 | bf16 | fp8
const char* kv_dtype_name(KvDtype d);
int kv_dtype_bytes(KvDtype d);

struct KvCache {
  KvDtype dtype = KvDtype::F32;
  Buffer<uint8_t> k, v;  // [capacity, HKV*HD] elements of `dtype`
  int64_t capacity = 0;
  // Row r (row_floats elements) as f32 / from f32 (scale: FP8 only).
  void store(bool key, int64_t r, int64_t row_floats, const float* src, float scale);
  void load(bool key, int64_t r, int64_t row_floats, float* dst, float scale) const;
  const float* f32_row(bool key, int64_t r, int64_t row_floats) const {  // F32 only
    return reinterpret_cast<const float*>((key ? k : v).data()) + r * row_floats;
  }
};

// Grows `kv` to hold at least n_total rows of row_floats each, keeping the first n_keep rows.
void grow_kv(KvCache& kv, int64_t n_total, int64_t n_keep, int64_t row_floats);

class SequenceState {
 public:
  SequenceState() = default;
  explicit SequenceState(const io::ModelConfig& cfg, KvDtype kv_dtype = KvDtype::F32);

  int64_t n_past() const { return n_past_; }
  // Bytes held now (KV at current capacity + Mamba states + journal).
  size_t bytes() const;
  // Bytes of the fixed part (Mamba conv+ssm) and of KV per token, for reporting.
  size_t fixed_bytes() const;
  size_t kv_bytes_per_token() const { return size_t(kv_row_floats_) * 2 * size_t(kv_dtype_bytes(kv_dtype_)) * kv_.size(); }
  void reset();  // back to an empty sequence (keeps allocations)
  // A compact copy of this state (Mamba conv + SSM states, the n_past KV rows; no journal) for
  // the prefix cache, and the state rebuilt from one. The copy is exact: a sequence restored from
  // a snapshot continues bitwise as the original would.
  SequenceState snapshot() const;
  void restore(const SequenceState& snap);

  // Internal to the model: layer-indexed storage (entries for other kinds are empty).
  std::vector<MambaState> mamba_;
  std::vector<KvCache> kv_;
  std::vector<MambaJournal> journal_;
  std::vector<int> mamba_slot_, attn_slot_;  // layer index -> slot or -1
  int64_t n_past_ = 0;
  int64_t pending_rows_ = 0;  // rows of the last recorded forward not yet accepted
  int64_t kv_row_floats_ = 0;
  KvDtype kv_dtype_ = KvDtype::F32;
  void ensure_kv_capacity(int64_t n_total);
};

}  // namespace nemo::model
