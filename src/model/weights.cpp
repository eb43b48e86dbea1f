#include "model/weights.h"

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/numeric.h"
#include "kernels/quantize.h"

namespace nemo::model {

Linear WeightBinder::linear(const layout::TensorSpec& s) const {
  return bind_checked(s.name, s.shape[0], s.shape[1], -1, 0);
}

Linear WeightBinder::expert(const layout::TensorSpec& s, int64_t n_experts) const {
  if (!store_.has(s.tensor_name()))
    if (const auto a = layout::stacked_alias(s, n_experts); a && store_.has(a->module + ".weight"))
      return bind_checked(a->module, s.shape[0], s.shape[1], a->index, a->count);
  return linear(s);
}

std::vector<float> WeightBinder::values(const layout::TensorSpec& s) const {
  if (!s.required && !store_.has(s.name)) {
    int64_t n = 1;
    for (auto d : s.shape) n *= d;
    return std::vector<float>(size_t(n), 0.0f);
  }
  return tensor_f32_any(s.name, s.accepted_shapes());
}

Linear WeightBinder::bind_checked(const std::string& prefix, int64_t out, int64_t in,
                                  int64_t expert, int64_t n_experts) const {
  const io::TensorView& wt = store_.get(prefix + ".weight");
  const io::TensorLookup lookup = [this](const std::string& name) -> std::optional<io::TensorInfo> {
    const io::TensorView* v = store_.find(name);
    if (!v) return std::nullopt;
    return io::TensorInfo{v->dtype, v->shape, *v->file, v->data};
  };
  const io::CheckedModule m = io::check_module(qc_, prefix, lookup);
  const bool stacked = expert >= 0;
  if (m.out != out || m.in != in || (stacked ? m.stacked != n_experts : m.stacked != 0))
    fail("{}: module '{}' has logical shape {}[{}, {}] ({} {}) but the config implies {}[{}, {}]",
         *wt.file, prefix, m.stacked ? fmt::format("[{}] x ", m.stacked) : "", m.out, m.in,
         io::quant_algo_name(m.quant.algo), wt.shape_str(),
         stacked ? fmt::format("[{}] x ", n_experts) : "", out, in);
  Linear w;
  w.rows = out;
  w.cols = in;
  const uint8_t* data = wt.data;
  switch (m.quant.algo) {
    case io::QuantAlgo::None:
      switch (m.weight_dtype) {
        case io::DType::F32:
          w.format = kernels::WeightFormat::F32;
          break;
        case io::DType::BF16:
          w.format = kernels::WeightFormat::BF16;
          w.arith = opt_.packed_arith;  // (a MoE router stays f32: MoEWeights::bind)
          break;
        case io::DType::F16:
          w.format = kernels::WeightFormat::F16;
          break;
        default:
          fail("{}: module '{}': unsupported weight dtype {}", *wt.file, prefix,
               io::dtype_name(m.weight_dtype));
      }
      if (stacked)
        data +=
            uint64_t(expert) * uint64_t(out * in) * uint64_t(io::dtype_bits(m.weight_dtype) / 8);
      w.data = data;
      break;
    case io::QuantAlgo::NVFP4:
    case io::QuantAlgo::W4A16_NVFP4:
      // W4A4 NVFP4 runs as W4A16 on CPU (input_scale unused), as vLLM's W4A16 path does.
      w.format = kernels::WeightFormat::NVFP4;
      w.data = data;
      w.scales = store_.get(prefix + ".weight_scale").data;
      w.scale = m.weight_scale;
      w.group = 16;
      w.arith = opt_.packed_arith;
      break;
    case io::QuantAlgo::FP8:
      w.format = kernels::WeightFormat::FP8_E4M3;
      w.data = data;
      w.scale = m.weight_scale;
      if (m.input_scale && opt_.fp8_static_activations)
        w.input_scale = *m.input_scale;  // W8A8: its E4M3 activations, f32 arithmetic
      else
        w.arith = opt_.packed_arith;
      break;
    case io::QuantAlgo::MlxAffine: {
      const int bits = m.quant.bits, g = m.quant.group_size;
      w.format = bits == 8 ? kernels::WeightFormat::AFFINE8 : kernels::WeightFormat::AFFINE4;
      w.group = g;
      const uint64_t wbytes = uint64_t(out) * uint64_t(in) * uint64_t(bits) / 8;
      const uint64_t sbytes = uint64_t(out) * uint64_t(in / g) * 2;
      const uint64_t e = stacked ? uint64_t(expert) : 0;
      w.data = data + e * wbytes;
      w.scales = store_.get(prefix + ".scales").data + e * sbytes;
      w.biases = store_.get(prefix + ".biases").data + e * sbytes;
      break;
    }
  }
  kernels::validate_packed_weight(w, *wt.file + ": module '" + prefix + "'");
  // The SIMD FP8 decoder maps NaN codes to a finite value: reject them once, here.
  if (w.format == kernels::WeightFormat::FP8_E4M3 &&
      kernels::e4m3_has_nan({static_cast<const uint8_t*>(w.data), size_t(out * in)}))
    fail("{}: module '{}': FP8 weight contains NaN codes (0x7F/0xFF)", *wt.file, prefix);
  return w;
}

std::vector<float> WeightBinder::tensor_f32_any(
    const std::string& name, const std::vector<std::vector<int64_t>>& shapes) const {
  const io::TensorView& t = store_.get(name);
  bool ok = false;
  for (const auto& s : shapes) ok |= t.shape == s;
  if (!ok)
    fail("{}: tensor '{}' has shape {} but the config implies {}", *t.file, name, t.shape_str(),
         io::shape_str(shapes[0]));
  const int64_t n = t.numel();
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case io::DType::F32:
        std::memcpy(&v[i], t.data + 4 * i, 4);
        break;
      case io::DType::BF16: {
        uint16_t b;
        std::memcpy(&b, t.data + 2 * i, 2);
        v[i] = bf16_to_f32(b);
        break;
      }
      case io::DType::F16: {
        uint16_t b;
        std::memcpy(&b, t.data + 2 * i, 2);
        v[i] = f16_to_f32(b);
        break;
      }
      default:
        fail("{}: tensor '{}' has dtype {}; expected F32, BF16 or F16", *t.file, name,
             io::dtype_name(t.dtype));
    }
    if (!std::isfinite(v[i]))
      fail("{}: tensor '{}' has a non-finite value at element {}", *t.file, name, i);
  }
  return v;
}

float WeightBinder::scalar_or(const std::string& name, float def) const {
  if (!store_.has(name)) return def;
  return tensor_f32_any(name, {{}, {1}}).at(0);
}

}  // namespace nemo::model
