// Weight reading, shape checks, FP8 block dequantization (V3 `_scale_inv` and V4 e8m0 `.scale`) and FP4 E2M1
// unpacking (V4 routed experts).
#include "model/weight_loader.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/progress_bar.h"

namespace dsinfer {

Tensor dequantize_fp8_blocks(const Tensor& w8, const Tensor& scale_inv, int64_t block_n, int64_t block_k) {
  DSI_CHECK(w8.ndim() == 2 && w8.dtype() == DType::F8_E4M3,
            "dequantize_fp8_blocks: expected a 2-D F8_E4M3 tensor");
  DSI_CHECK(block_n > 0 && block_k > 0, "dequantize_fp8_blocks: block size must be positive, got ", block_n,
            "x", block_k);
  const int64_t N = w8.dim(0), K = w8.dim(1);
  const int64_t bn = (N + block_n - 1) / block_n, bk = (K + block_k - 1) / block_k;
  DSI_CHECK(scale_inv.ndim() == 2 && scale_inv.dim(0) == bn && scale_inv.dim(1) == bk, "scale_inv has shape ",
            shape_str(scale_inv.shape()), ", expected [", bn, ", ", bk, "] for weight ",
            shape_str(w8.shape()), " with ", block_n, "x", block_k, " blocks");
  Tensor scales = scale_inv.to_f32();
  Tensor out = Tensor::empty(DType::F32, {N, K});
  const uint8_t* src = w8.data<uint8_t>();
  float lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = f8e4m3_to_f32(static_cast<uint8_t>(i));
  for (int64_t n = 0; n < N; ++n) {
    const float* srow = scales.f32() + (n / block_n) * bk;
    float* o = out.f32() + n * K;
    for (int64_t k = 0; k < K; ++k) o[k] = lut[src[n * K + k]] * srow[k / block_k];
  }
  return out;
}

Tensor dequantize_fp4_blocks(const Tensor& packed, const Tensor& scale, int64_t block_k) {
  DSI_CHECK(packed.ndim() == 2 && (packed.dtype() == DType::I8 || packed.dtype() == DType::U8),
            "dequantize_fp4_blocks: expected a 2-D int8 tensor of packed FP4 pairs");
  const int64_t N = packed.dim(0), K = packed.dim(1) * 2, bk = (K + block_k - 1) / block_k;
  DSI_CHECK(scale.ndim() == 2 && scale.dim(0) == N && scale.dim(1) == bk, "FP4 scale has shape ",
            shape_str(scale.shape()), ", expected [", N, ", ", bk, "] for ", K, " inputs in blocks of ",
            block_k);
  Tensor scales = scale.to_f32();
  Tensor out = Tensor::empty(DType::F32, {N, K});  // [N, K]
  const uint8_t* src = static_cast<const uint8_t*>(packed.raw());
  for (int64_t n = 0; n < N; ++n) {
    const float* srow = scales.f32() + n * bk;
    float* o = out.f32() + n * K;
    for (int64_t k = 0; k < K; k += 2) {
      const uint8_t byte = src[n * (K / 2) + k / 2];
      o[k] = fp4_e2m1_to_f32(byte & 0x0f) * srow[k / block_k];  // low nibble: even element
      o[k + 1] = fp4_e2m1_to_f32(byte >> 4) * srow[(k + 1) / block_k];
    }
  }
  return out;
}

namespace {

// "X.weight" -> "X.scale" (DeepSeek-V4's block scales); "" for other names.
std::string v4_scale_name(const std::string& name) {
  const std::string suffix = ".weight";
  if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  return name.substr(0, name.size() - suffix.size()) + ".scale";
}

}  // namespace

WeightLoader::WeightLoader(const SafetensorsArchive& archive, const ModelConfig& config,
                           ProgressBar* progress)
    : archive_(&archive), config_(config), progress_(progress) {}

WeightLoader::WeightLoader(const ModelConfig& config, uint64_t seed)
    : archive_(nullptr), seed_(seed), config_(config), progress_(nullptr) {}

Tensor WeightLoader::dummy(const std::string& name, const Shape& shape) const {
  const bool norm = name.find("norm") != std::string::npos;
  if (shape.size() == 1) {
    Tensor out = Tensor::zeros(DType::F32, shape);
    if (norm) std::fill(out.f32(), out.f32() + out.numel(), 1.0f);  // RMSNorm scales; biases stay 0
    return out;
  }
  // Every element is written below, by all threads at once: no zeroing pass, and the pages of a large tensor
  // are first touched in parallel (docs/benchmarks.md, "Dummy-weight loading": a 3-layer V2-Lite dummy bench on
  // the 2-core dev machine, median 10.5 s with a zeroing pass, 5.2 s without).
  Tensor out = Tensor::empty(DType::F32, shape);
  // splitmix64 stream seeded by the name: the same name and seed always give the same tensor.
  uint64_t state = seed_ ^ 0x9e3779b97f4a7c15ull;
  for (char c : name) state = (state ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.back()));
  float* p = out.f32();
  const int64_t n = out.numel();
  // Element i is a function of (state, i) alone, so the stream fills in parallel (large dummy models).
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = state + static_cast<uint64_t>(i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    // bf16-exact, as a bf16 checkpoint's values are: the CPU (float32 weights) and the GPU (bf16 weights)
    // then hold the same model, so their outputs can be compared at bf16 tolerance.
    p[i] = bf16_to_f32(f32_to_bf16((2.0f * u - 1.0f) * scale));
  }
  return out;
}

Tensor WeightLoader::dequantize_fp8(const std::string& name, const Tensor& w8) {
  std::string scale_name = name + "_scale_inv";
  if (!archive_->contains(scale_name) && archive_->contains(v4_scale_name(name)))
    scale_name = v4_scale_name(name);
  DSI_CHECK(archive_->contains(scale_name), archive_->file_of(name), ": FP8 tensor \"", name, "\" has no \"",
            scale_name, "\"");
  used_.insert(scale_name);
  try {
    return dequantize_fp8_blocks(w8, archive_->get(scale_name), config_.quant.block_n, config_.quant.block_k);
  } catch (const Error& e) {
    fail(archive_->file_of(name), ": tensor \"", name, "\": ", e.what());
  }
}

Tensor WeightLoader::get(const std::string& name, const Shape& shape) {
  Tensor host = read_f32(name, shape);
  return backend_ ? backend_->prepare_named_weight(std::move(host), name) : host;
}

Tensor WeightLoader::read_f32(const std::string& name, const Shape& shape) {
  if (!archive_) {
    used_.insert(name);
    return dummy(name, shape);
  }
  DSI_CHECK(archive_->contains(name), "checkpoint is missing tensor \"", name, "\" (expected ",
            shape_str(shape), ")");
  const TensorInfo& info = archive_->info(name);
  const std::string fp4_scale = v4_scale_name(name);
  const bool fp4 = (info.dtype == DType::I8 || info.dtype == DType::U8) && !fp4_scale.empty() &&
                   archive_->contains(fp4_scale) && shape.size() == 2;
  Shape stored = shape;
  if (fp4) stored.back() = shape.back() / 2;  // two FP4 values per byte
  DSI_CHECK(info.shape == stored && (!fp4 || shape.back() % 2 == 0), archive_->file_of(name), ": tensor \"",
            name, "\" has shape ", shape_str(info.shape), " but the config implies ", shape_str(stored),
            fp4 ? " (packed FP4)" : "");
  used_.insert(name);
  Tensor raw = archive_->get(name);
  Tensor out;
  switch (info.dtype) {
    case DType::F32:
    case DType::BF16:
    case DType::F16:
      out = raw.to_f32();
      break;
    case DType::F8_E4M3:
      out = dequantize_fp8(name, raw);
      break;
    case DType::I8:
    case DType::U8:
      if (fp4) {
        used_.insert(fp4_scale);
        try {
          out = dequantize_fp4_blocks(raw, archive_->get(fp4_scale), kFp4BlockK);
        } catch (const Error& e) {
          fail(archive_->file_of(name), ": tensor \"", name, "\": ", e.what());
        }
        break;
      }
      [[fallthrough]];
    default:
      fail(archive_->file_of(name), ": tensor \"", name, "\" has dtype ", dtype_name(info.dtype),
           ", expected a floating point type");
  }
  if (progress_) progress_->advance(static_cast<int64_t>(info.nbytes));
  return out;
}

Tensor WeightLoader::get_ids(const std::string& name, const Shape& shape) {
  if (!archive_) {
    // Dummy id tables (e.g. V4's tid2eid): a fixed spread of valid expert ids.
    const int64_t experts = std::max<int64_t>(1, config_.raw.value("n_routed_experts", int64_t{1}));
    Tensor out = Tensor::empty(DType::I32, shape);
    for (int64_t i = 0; i < out.numel(); ++i)
      out.data<int32_t>()[i] = static_cast<int32_t>((i * 7919) % experts);
    return out;
  }
  DSI_CHECK(archive_->contains(name), "checkpoint is missing tensor \"", name, "\" (expected ",
            shape_str(shape), ")");
  const TensorInfo& info = archive_->info(name);
  DSI_CHECK(info.shape == shape, archive_->file_of(name), ": tensor \"", name, "\" has shape ",
            shape_str(info.shape), " but the config implies ", shape_str(shape));
  used_.insert(name);
  Tensor raw = archive_->get(name);
  Tensor out = Tensor::empty(DType::I32, shape);
  const int64_t n = raw.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t v;
    switch (info.dtype) {
      case DType::I64:
        v = raw.data<int64_t>()[i];
        break;
      case DType::I32:
        v = raw.data<int32_t>()[i];
        break;
      default:
        fail(archive_->file_of(name), ": tensor \"", name, "\" has dtype ", dtype_name(info.dtype),
             ", expected I64 or I32");
    }
    DSI_CHECK(v >= INT32_MIN && v <= INT32_MAX, archive_->file_of(name), ": tensor \"", name, "\" value ", v,
              " does not fit in int32");
    out.data<int32_t>()[i] = static_cast<int32_t>(v);
  }
  if (progress_) progress_->advance(static_cast<int64_t>(info.nbytes));
  return out;
}

Linear WeightLoader::linear(const std::string& prefix, int64_t out, int64_t in, bool bias) {
  Linear l;
  l.weight = get(prefix + ".weight", {out, in});
  if (bias) l.bias = get(prefix + ".bias", {out});
  return l;
}

MlpWeights WeightLoader::mlp(const std::string& prefix, int64_t hidden, int64_t intermediate, bool bias) {
  MlpWeights m;
  m.gate = linear(prefix + ".gate_proj", intermediate, hidden, bias);
  m.up = linear(prefix + ".up_proj", intermediate, hidden, bias);
  m.down = linear(prefix + ".down_proj", hidden, intermediate, bias);
  return m;
}

std::vector<std::string> WeightLoader::unused(const std::vector<std::string>& ignored) const {
  std::vector<std::string> out;
  if (!archive_) return out;
  for (const std::string& name : archive_->names()) {
    if (used_.count(name)) continue;
    bool skip = false;
    for (const std::string& pattern : ignored) skip = skip || name.find(pattern) != std::string::npos;
    if (!skip) out.push_back(name);
  }
  return out;
}

}  // namespace dsinfer
