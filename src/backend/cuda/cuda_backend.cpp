// CudaBackend's dense ops: argument checks on the host, then the kernels of dsinfer_cuda on raw device
// pointers. Every op returns fresh device tensors; plan arrays come from the step plan (StepPlan) or a
// DeviceMirror. Attention, rope and cache writes are in cuda_backend_attention.cpp, the linear layers
// (linear, mlp and the fused norm/residual forms) in cuda_backend_linear.cpp.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/device_args.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/elementwise_kernels.h"
#include "backend/cuda/gemv_packed.h"
#include "backend/cuda/gemv_stamps.h"
#include "backend/cuda/kernel_trace.h"
#include "backend/cuda/packed_matrix.h"
#include "backend/cuda/runtime.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsinfer {

using cuda::dev_bf16;
using cuda::dev_f32;

namespace {

Tensor device_empty(Shape shape) {
  return Tensor::empty_on(Device::kCuda, DType::F32, std::move(shape));
}

// The bf16 rounding of a host float32 weight, on the host.
Tensor host_bf16(const Tensor& host_f32) {
  DSI_CHECK(host_f32.is_cpu() && host_f32.dtype() == DType::F32,
            "prepare_weight: expected a host float32 tensor");
  Tensor bits = Tensor::empty(DType::BF16, host_f32.shape());
  const float* src = host_f32.f32();
  uint16_t* dst = bits.data<uint16_t>();
  const int64_t n = host_f32.numel();
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
  return bits;
}

// A device copy of the bf16 matrix `bits` [N, K] followed, in the same allocation, by its packed copy for the
// decode GEMV (gemv_packed.h), registered while the allocation lives.
Tensor device_weight_with_packed_copy(const Tensor& bits) {
  return cuda::matrix_with_packed_copy(bits.dim(0), bits.dim(1),
                                       [&](void* w) { cuda::copy_to_device(w, bits.raw(), bits.nbytes()); });
}

}  // namespace

CudaBackend::CudaBackend(CudaBackendOptions options) : options_(options) {
  DSI_CHECK(options.gemv_activation_parts >= 0 && options.gemv_activation_parts <= 2,
            "CudaBackendOptions::gemv_activation_parts must be 0 (auto), 1 or 2, got ",
            options.gemv_activation_parts);
  cuda::register_allocator();
  cuda::start_kernel_trace_from_env();
  cuda::start_gemv_stamps_from_env();
}

Tensor CudaBackend::prepare_weight(Tensor host_f32) {
  return cuda::to_device(host_bf16(host_f32));
}

Tensor CudaBackend::prepare_named_weight(Tensor host_f32, const std::string& name) {
  if (host_f32.ndim() != 2 || !cuda::gemv_wants_packed_copy(name.c_str(), host_f32.dim(0), host_f32.dim(1)))
    return prepare_weight(std::move(host_f32));
  return device_weight_with_packed_copy(host_bf16(host_f32));
}

Tensor CudaBackend::to_host(const Tensor& t) {
  if (t.is_cpu()) return t;
  Tensor host = cuda::to_host(t);
  return host.dtype() == DType::F32 ? host : host.to_f32();
}

int64_t CudaBackend::free_memory_bytes() const {
  const std::vector<cuda::DeviceInfo> gpus = cuda::query_devices();
  return gpus.empty() ? 0 : static_cast<int64_t>(gpus[0].free_memory);
}

void CudaBackend::begin_step(const BatchPlan& plan) {
  upload_and_feed(plan);
}

void CudaBackend::stage_plan(const BatchPlan& plan) {
  upload_and_feed(plan);
}

void CudaBackend::end_step() {
  step_.clear_host();
}

Tensor CudaBackend::embed(const Tensor& table, const std::vector<int32_t>& ids) {
  DSI_CHECK(table.ndim() == 2, "embed: table must be 2-D, got ", shape_str(table.shape()));
  const uint16_t* tab = dev_bf16(table, "embed", "the table");
  const int64_t V = table.dim(0), H = table.dim(1), T = static_cast<int64_t>(ids.size());
  for (int32_t id : ids)
    DSI_CHECK(id >= 0 && id < V, "token id ", id, " is outside the vocabulary [0, ", V, ")");
  Tensor out = device_empty({T, H});  // [T, H]
  cuda::launch_embed(tab, device_array(ids, ids_), out.data<float>(), T, H, V);
  return out;
}

Tensor CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  const int64_t H = x.dim(-1), T = x.numel() / H;
  DSI_CHECK(weight.numel() == H, "rms_norm: weight has ", weight.numel(), " values for rows of ", H);
  Tensor out = device_empty(x.shape());  // [..., H]
  cuda::launch_rms_norm(dev_f32(x, "rms_norm", "x"), dev_bf16(weight, "rms_norm", "the weight"),
                        out.data<float>(), T, H, eps);
  return out;
}

void CudaBackend::add_inplace(Tensor& a, const Tensor& b) {
  DSI_CHECK(a.numel() == b.numel(), "add: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  cuda::launch_add_inplace(dev_f32(a, "add_inplace", "a"), dev_f32(b, "add_inplace", "b"), a.numel());
}

Tensor CudaBackend::gather_rows(const Tensor& x, const std::vector<int32_t>& rows) {
  const int64_t H = x.dim(0) ? x.numel() / x.dim(0) : 0;
  for (int32_t r : rows) DSI_CHECK(r >= 0 && r < x.dim(0), "gather_rows: row ", r, " out of range");
  // Every row in order (a decode step: one logits row per sequence): x itself, no copy and no kernel between
  // the last layer and the LM head. Callers only read the result.
  bool identity = static_cast<int64_t>(rows.size()) == x.dim(0);
  for (size_t i = 0; identity && i < rows.size(); ++i) identity = rows[i] == static_cast<int32_t>(i);
  if (identity) return x;
  Shape shape = x.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = device_empty(shape);
  cuda::launch_gather_rows(dev_f32(x, "gather_rows", "x"), device_array(rows, rows_), out.data<float>(),
                           static_cast<int64_t>(rows.size()), H);
  return out;
}

}  // namespace dsinfer
