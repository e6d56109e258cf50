// CudaBackend's dense ops: argument checks on the host, then the kernels of dsinfer_cuda on raw device
// pointers. Every op returns fresh device tensors; the plan arrays reach the GPU through DeviceMirror.
// The linear layers (linear, mlp and the fused norm/residual forms) are in cuda_backend_linear.cpp.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/elementwise_kernels.h"
#include "backend/cuda/rope_kernels.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsinfer {

namespace {

// x must be a float32 device tensor (activations).
const float* dev_f32(const Tensor& x, const char* op, const char* what) {
  DSI_CHECK(x.device() == Device::kCuda && x.dtype() == DType::F32, op, ": ", what,
            " must be a float32 CUDA tensor, got ", dtype_name(x.dtype()), " on ", device_name(x.device()));
  return x.data<float>();
}
float* dev_f32(Tensor& x, const char* op, const char* what) {
  return const_cast<float*>(dev_f32(static_cast<const Tensor&>(x), op, what));
}

// w must be a bf16 device tensor (weights, see prepare_weight).
const uint16_t* dev_bf16(const Tensor& w, const char* op, const char* what) {
  DSI_CHECK(w.device() == Device::kCuda && w.dtype() == DType::BF16, op, ": ", what,
            " must be a bf16 CUDA tensor (loaded through prepare_weight), got ", dtype_name(w.dtype()),
            " on ", device_name(w.device()));
  return w.data<uint16_t>();
}

Tensor device_empty(Shape shape) {
  return Tensor::empty_on(Device::kCuda, DType::F32, std::move(shape));
}

}  // namespace

CudaBackend::CudaBackend(CudaBackendOptions options) : options_(options) {
  cuda::register_allocator();
}

Tensor CudaBackend::prepare_weight(Tensor host_f32) {
  DSI_CHECK(host_f32.is_cpu() && host_f32.dtype() == DType::F32,
            "prepare_weight: expected a host float32 tensor");
  Tensor bits = Tensor::empty(DType::BF16, host_f32.shape());
  const float* src = host_f32.f32();
  uint16_t* dst = bits.data<uint16_t>();
  for (int64_t i = 0, n = host_f32.numel(); i < n; ++i) dst[i] = f32_to_bf16(src[i]);
  return cuda::to_device(bits);
}

Tensor CudaBackend::to_host(const Tensor& t) {
  if (t.is_cpu()) return t;
  Tensor host = cuda::to_host(t);
  return host.dtype() == DType::F32 ? host : host.to_f32();
}

Tensor CudaBackend::embed(const Tensor& table, const std::vector<int32_t>& ids) {
  DSI_CHECK(table.ndim() == 2, "embed: table must be 2-D, got ", shape_str(table.shape()));
  const uint16_t* tab = dev_bf16(table, "embed", "the table");
  const int64_t V = table.dim(0), H = table.dim(1), T = static_cast<int64_t>(ids.size());
  for (int32_t id : ids)
    DSI_CHECK(id >= 0 && id < V, "token id ", id, " is outside the vocabulary [0, ", V, ")");
  Tensor out = device_empty({T, H});  // [T, H]
  cuda::launch_embed(tab, ids_.upload(ids), out.data<float>(), T, H, V);
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

void CudaBackend::rope(Tensor& x, const std::vector<int32_t>& positions, const RopeTable& table,
                       int64_t offset, RopeLayout layout, bool inverse) {
  // x [T, heads, head_dim]; rotate dims [offset, offset + rope_dim).
  DSI_CHECK(x.ndim() == 3, "rope: x must be [T, heads, head_dim], got ", shape_str(x.shape()));
  const int64_t T = x.dim(0), heads = x.dim(1), D = x.dim(2), R = table.rope_dim;
  DSI_CHECK(static_cast<int64_t>(positions.size()) == T, "rope: ", positions.size(), " positions for ", T,
            " tokens");
  DSI_CHECK(offset >= 0 && offset + R <= D, "rope: rope dims exceed the head dimension");
  DSI_CHECK(static_cast<int64_t>(table.inv_freq.size()) == R / 2, "rope: table has ", table.inv_freq.size(),
            " frequencies for rope_dim ", R);
  cuda::launch_rope(dev_f32(x, "rope", "x"), positions_.upload(positions), inv_freq_.upload(table.inv_freq),
                    T, heads, D, offset, R, table.attention_scaling, layout == RopeLayout::kInterleaved,
                    inverse);
}

void CudaBackend::write_kv(KvCache& cache, int64_t layer, const BatchPlan& plan, const Tensor& a,
                           const Tensor& b) {
  DSI_CHECK(cache.device() == Device::kCuda, "write_kv: the KV cache is not on the GPU");
  const int64_t T = plan.num_tokens();
  const int64_t wa = a.numel() / std::max<int64_t>(T, 1);
  const int64_t wb = b ? b.numel() / std::max<int64_t>(T, 1) : 0;
  DSI_CHECK(wa + wb == cache.width(layer), "write_kv: rows of ", wa + wb, " values for a cache row of ",
            cache.width(layer));
  DSI_CHECK(static_cast<int64_t>(plan.slot_mapping.size()) == T, "write_kv: slot_mapping has ",
            plan.slot_mapping.size(), " entries for ", T, " tokens");
  Tensor storage = cache.storage(layer);
  cuda::launch_write_kv(storage.data<float>(), cache.width(layer), slot_mapping_.upload(plan.slot_mapping),
                        dev_f32(a, "write_kv", "a"), wa, b ? dev_f32(b, "write_kv", "b") : nullptr, wb, T);
}

Tensor CudaBackend::attention_gqa(const Tensor& q, const KvCache& cache, int64_t layer, const BatchPlan& plan,
                                  int64_t kv_heads, int64_t head_dim, int64_t v_head_dim, float scale) {
  // q [T, Hq, D] -> out [T, Hq * Dv]
  DSI_CHECK(cache.device() == Device::kCuda, "attention_gqa: the KV cache is not on the GPU");
  DSI_CHECK(q.ndim() == 3, "attention_gqa: q must be [T, Hq, D], got ", shape_str(q.shape()));
  const int64_t T = q.dim(0), Hq = q.dim(1), D = head_dim, Dv = v_head_dim;
  DSI_CHECK(q.dim(2) == D && kv_heads > 0 && Hq % kv_heads == 0, "attention_gqa: bad query shape ",
            shape_str(q.shape()));
  DSI_CHECK(cache.width(layer) == kv_heads * (D + Dv), "attention_gqa: cache row width mismatch");
  DSI_CHECK(T == plan.num_tokens(), "attention_gqa: ", T, " query tokens for a plan of ", plan.num_tokens());
  std::vector<int32_t> seq_of(static_cast<size_t>(T));
  for (int32_t s = 0; s < plan.num_seqs(); ++s)
    for (int32_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t) seq_of[t] = s;
  cuda::DevicePlanView view;
  view.positions = positions_.upload(plan.positions);
  view.token_seq = token_seq_.upload(seq_of);
  view.block_table = block_table_.upload(plan.block_table);
  view.block_table_indptr = block_table_indptr_.upload(plan.block_table_indptr);
  view.block_size = plan.block_size;
  Tensor out = device_empty({T, Hq * Dv});
  cuda::launch_attention_gqa(dev_f32(q, "attention_gqa", "q"), cache.storage(layer).data<float>(),
                             cache.width(layer), view, out.data<float>(), T, Hq, kv_heads, D, Dv, scale);
  return out;
}

Tensor CudaBackend::gather_rows(const Tensor& x, const std::vector<int32_t>& rows) {
  const int64_t H = x.dim(0) ? x.numel() / x.dim(0) : 0;
  for (int32_t r : rows) DSI_CHECK(r >= 0 && r < x.dim(0), "gather_rows: row ", r, " out of range");
  Shape shape = x.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = device_empty(shape);
  cuda::launch_gather_rows(dev_f32(x, "gather_rows", "x"), rows_.upload(rows), out.data<float>(),
                           static_cast<int64_t>(rows.size()), H);
  return out;
}

}  // namespace dsinfer
