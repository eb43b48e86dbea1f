#include "model/weights.h"

#include <cstring>

#include "base/error.h"
#include "base/numeric.h"

namespace nemo::model {

namespace {
std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}
}  // namespace

const io::TensorView& WeightBinder::expect(const std::string& name, const std::vector<int64_t>& shape) const {
  const io::TensorView& t = store_.get(name);
  if (t.shape != shape)
    fail("{}: tensor '{}' has shape {} but the config implies {}", *t.file, name, t.shape_str(), shape_str(shape));
  return t;
}

Linear WeightBinder::linear(const std::string& prefix, int64_t out, int64_t in) const {
  const std::string name = prefix + ".weight";
  const io::TensorView& t = store_.get(name);
  Linear w;
  w.rows = out;
  w.cols = in;
  switch (t.dtype) {
    case io::DType::F32: w.format = kernels::WeightFormat::F32; break;
    case io::DType::BF16: w.format = kernels::WeightFormat::BF16; break;
    case io::DType::F16: w.format = kernels::WeightFormat::F16; break;
    default:
      fail("{}: tensor '{}' has dtype {}; packed formats need a quantization config (not loaded)", *t.file, name,
           io::dtype_name(t.dtype));
  }
  expect(name, {out, in});
  w.data = t.data;
  return w;
}

std::vector<float> WeightBinder::tensor_f32(const std::string& name, std::vector<int64_t> shape) const {
  const io::TensorView& t = expect(name, shape);
  const int64_t n = t.numel();
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case io::DType::F32: std::memcpy(&v[i], t.data + 4 * i, 4); break;
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
        fail("{}: tensor '{}' has dtype {}; expected F32, BF16 or F16", *t.file, name, io::dtype_name(t.dtype));
    }
  }
  return v;
}

std::vector<float> WeightBinder::vector(const std::string& name, int64_t n) const {
  return tensor_f32(name, {n});
}

}  // namespace nemo::model
