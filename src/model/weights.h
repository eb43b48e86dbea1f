// Binding checkpoint tensors to kernel weight views, with shape/dtype validation.
// This is the seam where the formats meet the model: a Linear is a kernels::PackedWeight whatever
// its storage (BF16/F16/F32, ModelOpt NVFP4 / FP8, MLX affine 4/8-bit, stacked MLX experts);
// the block code never sees the format. Each module's format is resolved from the checkpoint's
// quantization config by exact module name and cross-checked against the tensors present
// (io::check_module): a mismatch is an error naming the module and file.
#pragma once
#include <string>
#include <vector>

#include "io/quant_config.h"
#include "io/safetensors.h"
#include "kernels/linear.h"
#include "model/layout.h"
#include "model/state.h"

namespace nemo::model {

using Linear = kernels::PackedWeight;

struct LoadOptions {
  // FP8 W8A8 layers: emulate the static activation quantisation (input_scale) like GPU engines,
  // instead of the default W8A16 (f32 activations). For parity comparisons only.
  bool fp8_static_activations = false;
  // Attention KV-cache storage (f32 exact; bf16; fp8 with the checkpoint's k/v scales).
  KvDtype kv_dtype = KvDtype::F32;
  // --no-mmap: read the checkpoint into anonymous memory at load (TensorStore::make_resident)
  // instead of serving weights from the file mapping. Resident size is the file size either way
  // once every expert was routed to; unrouted experts are then read too.
  bool no_mmap = false;
  // NVFP4, FP8 and bf16 layers' arithmetic (--arith): F32 (default: the activations as computed)
  // or Bf16 (each activation rounded to bf16 first, as GPU W4A16 / W8A16 kernels and bf16 GEMMs
  // take them; docs/FORMATS.md §2.1). One switch for the whole model, MTP head and drafter
  // included, so every forward of a run (decode, verify, prefill) multiplies the same way and
  // speculation stays lossless. MoE routers, FP8 layers under fp8_static_activations (W8A8),
  // affine, f16 and f32 layers always take f32 activations.
  kernels::Arith packed_arith = kernels::Arith::F32;
};

class WeightBinder {
 public:
  WeightBinder(const io::TensorStore& store, const io::QuantConfig& qc, LoadOptions opt = {})
      : store_(store), qc_(qc), opt_(opt) {}

  // A Linear entry of the layout, in whatever format the checkpoint stores it (shape checked
  // against the entry's logical [out, in]).
  Linear linear(const layout::TensorSpec& s) const;
  // A routed expert's Linear: per-expert tensors, or expert `s.index` of an MLX stacked module.
  Linear expert(const layout::TensorSpec& s, int64_t n_experts) const;
  // A Vector or Conv entry widened to f32 (zeros when an optional entry is absent; every value
  // must be finite).
  std::vector<float> values(const layout::TensorSpec& s) const;
  // A scalar tensor (e.g. k_scale), widened to f32, or `def` when absent.
  float scalar_or(const std::string& name, float def) const;
  bool has(const std::string& name) const { return store_.has(name); }
  const io::TensorStore& store() const { return store_; }
  const io::QuantConfig& quant() const { return qc_; }

 private:
  Linear bind_checked(const std::string& prefix, int64_t out, int64_t in, int64_t expert,
                      int64_t n_experts) const;
  std::vector<float> tensor_f32_any(const std::string& name,
                                    const std::vector<std::vector<int64_t>>& shapes) const;
  const io::TensorStore& store_;
  const io::QuantConfig& qc_;
  LoadOptions opt_;
};

}  // namespace nemo::model
