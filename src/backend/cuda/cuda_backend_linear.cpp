// CudaBackend's linear layers: linear, mlp and the fused norm_linears / linear_residual / norm_mlp_residual.
// Up to kGemvMaxRows rows (decode) run the GEMV kernels on fp32 activations split into gemv_parts() bf16
// parts (1: rounded to bf16, as the GEMMs below do by default), with the RMSNorm, the SwiGLU and the residual
// add fused into them. More rows run cuBLASLt: activations rounded to bf16 by the kernel
// that produces them (RMSNorm, SiLU-mul), the residual add as the GEMM's beta = 1; with
// split_gemm_activations the fp32 activations are split into bf16 hi/lo halves (two GEMMs) instead.
#include "backend/cuda/bf16_activation_kernels.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_args.h"
#include "backend/cuda/elementwise_kernels.h"
#include "backend/cuda/gemm_cublaslt.h"
#include "backend/cuda/gemv_kernels.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsinfer {

using cuda::dev_bf16;
using cuda::dev_f32;

namespace {

const uint16_t* bias_of(const Linear& w, const char* op) {
  return w.bias ? dev_bf16(w.bias, op, "the bias") : nullptr;
}

// Checks that w takes K inputs and that its bias matches its outputs.
void check_linear(const Linear& w, int64_t K, const char* op) {
  DSI_CHECK(w.weight.ndim() == 2 && w.in_features() == K, op, ": input has ", K, " features, weight ",
            shape_str(w.weight.shape()), " expects ", w.weight.ndim() == 2 ? w.in_features() : -1);
  DSI_CHECK(!w.bias || w.bias.numel() == w.out_features(), op, ": bias has ", w.bias.numel(), " values for ",
            w.out_features(), " outputs");
}

// Checks the three matrices of a SwiGLU block over H features; returns the intermediate size.
int64_t check_mlp(const MlpWeights& w, int64_t H, const char* op) {
  check_linear(w.gate, H, op);
  check_linear(w.up, H, op);
  const int64_t I = w.gate.out_features();
  DSI_CHECK(w.up.out_features() == I, op, ": gate has ", I, " outputs, up ", w.up.out_features());
  check_linear(w.down, I, op);
  DSI_CHECK(w.down.out_features() == H, op, ": down projection has ", w.down.out_features(),
            " outputs for a hidden size of ", H);
  return I;
}

Tensor f32_empty(Shape shape) {
  return Tensor::empty_on(Device::kCuda, DType::F32, std::move(shape));
}
Tensor bf16_empty(Shape shape) {
  return Tensor::empty_on(Device::kCuda, DType::BF16, std::move(shape));
}

// x's shape with the last dimension replaced by n.
Shape with_last(const Tensor& x, int64_t n) {
  Shape shape = x.shape();
  shape.back() = n;
  return shape;
}

// The auto GEMV shape with `parts` bf16 parts per activation.
cuda::GemvConfig gemv_config(int parts) {
  cuda::GemvConfig c;
  c.splits = parts;
  return c;
}

// y (=|+=) x w^T (+ b) for x [M, K] on the GEMV kernels (M <= kGemvMaxRows), `parts` bf16 parts per
// activation.
void gemv(const float* x, int64_t M, int64_t K, const Linear& w, float* y, bool accumulate, int parts,
          const char* op) {
  const cuda::GemvMatrix mat{dev_bf16(w.weight, op, "the weight"), bias_of(w, op), y, w.out_features()};
  cuda::launch_gemv(x, M, K, &mat, 1, {}, accumulate, gemv_config(parts));
}

// act [M, I] = silu(gate) * up (clamped by w.swiglu_limit) for x [M, H] on the GEMV kernels, optionally
// RMS-normalised first.
void gemv_swiglu(const float* x, int64_t M, int64_t H, int64_t I, const MlpWeights& w, cuda::GemvNorm norm,
                 float* act, int parts, const char* op) {
  cuda::launch_gemv_swiglu(x, M, H, dev_bf16(w.gate.weight, op, "the gate weight"), bias_of(w.gate, op),
                           dev_bf16(w.up.weight, op, "the up weight"), bias_of(w.up, op), act, I, norm,
                           w.swiglu_limit, gemv_config(parts));
}

// y [M, H] (=|+=) down(silu(gate x) * up x) for rows x [M, H] on cuBLASLt (M > kGemvMaxRows): gate and up
// in fp32, the SiLU-mul rounding to bf16 for the down projection (split: fp32, split again).
void mlp_gemm(CudaBackend& b, bool split, const Tensor& rows, const MlpWeights& w, float* y,
              bool accumulate) {
  const int64_t M = rows.dim(0), H = rows.dim(1), I = w.gate.out_features();
  const Tensor gate = b.linear(rows, w.gate), up = b.linear(rows, w.up);  // [M, I]
  const uint16_t* down = dev_bf16(w.down.weight, "mlp", "the down weight");
  if (split) {
    Tensor act = f32_empty({M, I});
    cuda::launch_silu_mul(gate.data<float>(), up.data<float>(), act.data<float>(), M * I, w.swiglu_limit);
    cuda::linear_bf16(act.data<float>(), down, bias_of(w.down, "mlp"), y, M, H, I, true, accumulate);
  } else {
    Tensor act = bf16_empty({M, I});
    cuda::launch_silu_mul_bf16(gate.data<float>(), up.data<float>(), act.data<uint16_t>(), M * I,
                               w.swiglu_limit);
    cuda::gemm_bf16(act.data<uint16_t>(), down, bias_of(w.down, "mlp"), y, M, H, I, accumulate);
  }
}

}  // namespace

Tensor CudaBackend::linear(const Tensor& x, const Linear& w) {
  const int64_t K = x.dim(-1), N = w.out_features();
  check_linear(w, K, "linear");
  const int64_t M = K ? x.numel() / K : 0;
  Tensor out = f32_empty(with_last(x, N));  // [..., N]
  const float* xp = dev_f32(x, "linear", "x");
  if (M <= cuda::kGemvMaxRows) {
    gemv(xp, M, K, w, out.data<float>(), false, gemv_parts(), "linear");
  } else {
    cuda::linear_bf16(xp, dev_bf16(w.weight, "linear", "the weight"), bias_of(w, "linear"), out.data<float>(),
                      M, N, K, options_.split_gemm_activations);
  }
  return out;
}

Tensor CudaBackend::mlp(const Tensor& x, const MlpWeights& w) {
  const int64_t H = x.dim(-1), M = H ? x.numel() / H : 0;
  const int64_t I = check_mlp(w, H, "mlp");
  const float* xp = dev_f32(x, "mlp", "x");
  Tensor out = f32_empty(x.shape());  // [..., H]
  if (M <= cuda::kGemvMaxRows) {
    Tensor act = f32_empty({M, I});
    gemv_swiglu(xp, M, H, I, w, {}, act.data<float>(), gemv_parts(), "mlp");
    gemv(act.data<float>(), M, I, w.down, out.data<float>(), false, gemv_parts(), "mlp");
    return out;
  }
  mlp_gemm(*this, options_.split_gemm_activations, x.reshape({M, H}), w, out.data<float>(), false);
  return out;
}

std::vector<Tensor> CudaBackend::norm_linears(const Tensor& x, const Tensor& norm, float eps,
                                              const std::vector<const Linear*>& linears) {
  const int64_t H = x.dim(-1), M = H ? x.numel() / H : 0;
  DSI_CHECK(norm.numel() == H, "norm_linears: norm weight has ", norm.numel(), " values for rows of ", H);
  const float* xp = dev_f32(x, "norm_linears", "x");
  const uint16_t* nw = dev_bf16(norm, "norm_linears", "the norm weight");
  std::vector<Tensor> out;
  out.reserve(linears.size());
  for (const Linear* w : linears) {
    check_linear(*w, H, "norm_linears");
    out.push_back(f32_empty(with_last(x, w->out_features())));  // [..., out_i]
  }
  if (M <= cuda::kGemvMaxRows) {
    // One launch per kGemvMaxMatrices matrices (q, k and v together).
    for (size_t i = 0; i < linears.size(); i += cuda::kGemvMaxMatrices) {
      cuda::GemvMatrix mats[cuda::kGemvMaxMatrices];
      const int count = static_cast<int>(std::min<size_t>(cuda::kGemvMaxMatrices, linears.size() - i));
      for (int j = 0; j < count; ++j) {
        const Linear& w = *linears[i + j];
        mats[j] = {dev_bf16(w.weight, "norm_linears", "the weight"), bias_of(w, "norm_linears"),
                   out[i + j].data<float>(), w.out_features()};
      }
      cuda::launch_gemv(xp, M, H, mats, count, {nw, eps}, false, gemv_config(gemv_parts()));
    }
  } else if (options_.split_gemm_activations) {
    const Tensor normed = rms_norm(x, norm, eps);  // [..., H]
    for (size_t i = 0; i < linears.size(); ++i)
      cuda::linear_bf16(normed.data<float>(), dev_bf16(linears[i]->weight, "norm_linears", "the weight"),
                        bias_of(*linears[i], "norm_linears"), out[i].data<float>(), M,
                        linears[i]->out_features(), H, true);
  } else {
    Tensor normed = bf16_empty({M, H});
    cuda::launch_rms_norm_bf16(xp, nw, normed.data<uint16_t>(), M, H, eps);
    for (size_t i = 0; i < linears.size(); ++i)
      cuda::gemm_bf16(normed.data<uint16_t>(), dev_bf16(linears[i]->weight, "norm_linears", "the weight"),
                      bias_of(*linears[i], "norm_linears"), out[i].data<float>(), M,
                      linears[i]->out_features(), H);
  }
  return out;
}

void CudaBackend::linear_residual(const Tensor& x, const Linear& w, Tensor& residual) {
  const int64_t K = x.dim(-1), N = w.out_features();
  check_linear(w, K, "linear_residual");
  const int64_t M = K ? x.numel() / K : 0;
  DSI_CHECK(residual.numel() == M * N, "linear_residual: residual ", shape_str(residual.shape()), " for ", M,
            " rows of ", N, " outputs");
  const float* xp = dev_f32(x, "linear_residual", "x");
  float* y = const_cast<float*>(dev_f32(residual, "linear_residual", "the residual"));
  if (M <= cuda::kGemvMaxRows) {
    gemv(xp, M, K, w, y, true, gemv_parts(), "linear_residual");
  } else {
    cuda::linear_bf16(xp, dev_bf16(w.weight, "linear_residual", "the weight"), bias_of(w, "linear_residual"),
                      y, M, N, K, options_.split_gemm_activations, true);
  }
}

int CudaBackend::gemv_parts() const {
  if (options_.gemv_activation_parts > 0) return options_.gemv_activation_parts;
  return options_.split_gemm_activations ? 2 : 1;
}

void CudaBackend::norm_mlp_residual(Tensor& residual, const Tensor& norm, float eps, const MlpWeights& w) {
  norm_mlp_residual_parts(residual, norm, eps, w, gemv_parts());
}

void CudaBackend::norm_mlp_residual_parts(Tensor& residual, const Tensor& norm, float eps,
                                          const MlpWeights& w, int parts) {
  const char* op = "norm_mlp_residual";
  const int64_t H = residual.dim(-1), M = H ? residual.numel() / H : 0;
  const int64_t I = check_mlp(w, H, op);
  DSI_CHECK(norm.numel() == H, op, ": norm weight has ", norm.numel(), " values for rows of ", H);
  float* res = const_cast<float*>(dev_f32(residual, op, "the residual"));
  const uint16_t* nw = dev_bf16(norm, op, "the norm weight");
  if (M <= cuda::kGemvMaxRows) {
    Tensor act = f32_empty({M, I});
    gemv_swiglu(res, M, H, I, w, {nw, eps}, act.data<float>(), parts, op);
    gemv(act.data<float>(), M, I, w.down, res, true, parts, op);
    return;
  }
  if (options_.split_gemm_activations) {
    mlp_gemm(*this, true, rms_norm(residual, norm, eps).reshape({M, H}), w, res, true);
    return;
  }
  Tensor normed = bf16_empty({M, H});
  cuda::launch_rms_norm_bf16(res, nw, normed.data<uint16_t>(), M, H, eps);
  Tensor gate = f32_empty({M, I}), up = f32_empty({M, I});
  cuda::gemm_bf16(normed.data<uint16_t>(), dev_bf16(w.gate.weight, op, "the gate weight"),
                  bias_of(w.gate, op), gate.data<float>(), M, I, H);
  cuda::gemm_bf16(normed.data<uint16_t>(), dev_bf16(w.up.weight, op, "the up weight"), bias_of(w.up, op),
                  up.data<float>(), M, I, H);
  Tensor act = bf16_empty({M, I});
  cuda::launch_silu_mul_bf16(gate.data<float>(), up.data<float>(), act.data<uint16_t>(), M * I,
                             w.swiglu_limit);
  cuda::gemm_bf16(act.data<uint16_t>(), dev_bf16(w.down.weight, op, "the down weight"), bias_of(w.down, op),
                  res, M, H, I, true);
}

}  // namespace dsinfer
