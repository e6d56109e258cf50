// WeightLoader: reads named checkpoint tensors as float32 for the reference backend, checking each shape
// against the config and dequantizing DeepSeek-V3 FP8 block-scaled weights (w8 * scale_inv per block),
// DeepSeek-V4 FP8 weights with e8m0 `.scale` blocks and V4 FP4 E2M1 experts (int8 pairs + e8m0 `.scale`).
// Without an archive it makes dummy weights instead: deterministic random tensors of the asked shape
// (benchmarks of any model size from config.json alone).
#pragma once
#include <set>
#include <string>

#include "backend/backend.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace dsinfer {

class ProgressBar;

class WeightLoader {
 public:
  WeightLoader(const SafetensorsArchive& archive, const ModelConfig& config, ProgressBar* progress = nullptr);
  // Dummy weights: every get() returns random values (norm weights 1, biases 0, matrices uniform in
  // +-1/sqrt(columns), bf16-exact), seeded by `seed` and the tensor name; has() is false (optional tensors
  // are absent).
  WeightLoader(const ModelConfig& config, uint64_t seed);

  // Every get() result then goes through backend.prepare_weight (e.g. to bf16 on the GPU); without a
  // backend get() returns host float32.
  void set_backend(Backend* backend) { backend_ = backend; }
  Backend* backend() const { return backend_; }

  bool has(const std::string& name) const { return archive_ && archive_->contains(name); }
  // Float32 copy of `name`, which must have `shape` (for packed FP4 the unpacked shape), prepared by the
  // backend when one is set.
  Tensor get(const std::string& name, const Shape& shape);
  // The same as host float32, never prepared by the backend (for weights a model re-lays out first).
  Tensor get_host(const std::string& name, const Shape& shape) { return read_f32(name, shape); }
  // Int32 copy of an integer table (I64 or I32 in the checkpoint), e.g. V4's tid2eid.
  Tensor get_ids(const std::string& name, const Shape& shape);
  // `prefix`.weight [out, in] (+ `prefix`.bias [out] when `bias`).
  Linear linear(const std::string& prefix, int64_t out, int64_t in, bool bias = false);
  MlpWeights mlp(const std::string& prefix, int64_t hidden, int64_t intermediate, bool bias = false);
  // Names of checkpoint tensors that were never read, excluding those matching `ignored` substrings.
  std::vector<std::string> unused(const std::vector<std::string>& ignored) const;

 private:
  Tensor read_f32(const std::string& name, const Shape& shape);
  Tensor dequantize_fp8(const std::string& name, const Tensor& w8);
  Tensor dummy(const std::string& name, const Shape& shape) const;
  const SafetensorsArchive* archive_;
  uint64_t seed_ = 0;
  const ModelConfig& config_;
  ProgressBar* progress_;
  Backend* backend_ = nullptr;
  std::set<std::string> used_;
};

// Inputs per e8m0 scale of DeepSeek-V4's FP4 expert weights.
inline constexpr int64_t kFp4BlockK = 32;

// Float32 copy of FP4 E2M1 weights packed two per byte (low nibble = even element) [N, K/2] with one
// power-of-two scale per `block_k` inputs [N, ceil(K/block_k)]; returns [N, K].
Tensor dequantize_fp4_blocks(const Tensor& packed, const Tensor& scale, int64_t block_k);

// Float32 copy of an FP8 E4M3 weight [N, K] with per-block float scales [ceil(N/bn), ceil(K/bk)].
Tensor dequantize_fp8_blocks(const Tensor& w8, const Tensor& scale_inv, int64_t block_n, int64_t block_k);

}  // namespace dsinfer
