// Binding checkpoint tensors to kernel weight views, with shape/dtype validation.
// This is the seam where packed formats (NVFP4, FP8, MLX affine) plug in: a Linear is a
// kernels::PackedWeight whatever its storage; the model code never sees the format.
#pragma once
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "kernels/linear.h"

namespace nemo::model {

using Linear = kernels::PackedWeight;

class WeightBinder {
 public:
  explicit WeightBinder(const io::TensorStore& store) : store_(store) {}

  // A linear layer `prefix`.weight of logical shape [out, in].
  Linear linear(const std::string& prefix, int64_t out, int64_t in) const;
  // A small parameter vector widened to f32 (norm weights, biases, A_log, D, dt_bias).
  std::vector<float> vector(const std::string& name, int64_t n) const;
  // A small parameter tensor of any shape with `numel` elements, widened to f32.
  std::vector<float> tensor_f32(const std::string& name, std::vector<int64_t> shape) const;
  bool has(const std::string& name) const { return store_.has(name); }
  const io::TensorStore& store() const { return store_; }

 private:
  const io::TensorView& expect(const std::string& name, const std::vector<int64_t>& shape) const;
  const io::TensorStore& store_;
};

}  // namespace nemo::model
