// CudaBackend ops of DeepSeek-V4 that have no CUDA kernel yet: each throws a clear error
// (load_model refuses those models on the GPU, so these guard direct callers).
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"

namespace dsinfer {

namespace {

[[noreturn]] void no_kernel(const char* op) {
  fail("CUDA backend: ", op, " has no CUDA kernel yet");
}

}  // namespace

Tensor CudaBackend::hc_expand(const Tensor&, int64_t) {
  no_kernel("hc_expand");
}
Tensor CudaBackend::hc_pre(const Tensor&, const HyperConnWeights&, int64_t, float, float, Tensor*, Tensor*) {
  no_kernel("hc_pre");
}
Tensor CudaBackend::hc_post(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_kernel("hc_post");
}
Tensor CudaBackend::hc_head(const Tensor&, const HyperConnWeights&, float, float) {
  no_kernel("hc_head");
}
Tensor CudaBackend::moe_weights_for(const Tensor&, const Tensor&, const Tensor&, const RoutingParams&) {
  no_kernel("moe_weights_for");
}
Tensor CudaBackend::compress_rows(const KvCache&, int64_t, const BatchPlan&, const CompressedRows&,
                                  const Tensor&, int64_t, bool) {
  no_kernel("compress_rows");
}
void CudaBackend::write_compressed(KvCache&, int64_t, const BatchPlan&, const CompressedRows&,
                                   const Tensor&) {
  no_kernel("write_compressed");
}
Tensor CudaBackend::indexer_topk(const Tensor&, const Tensor&, const KvCache&, int64_t, const BatchPlan&,
                                 int64_t, int64_t, float, float) {
  no_kernel("indexer_topk");
}
Tensor CudaBackend::attention_v4(const Tensor&, const KvCache&, int64_t, int64_t, int64_t, int64_t,
                                 const Tensor&, const BatchPlan&, const Tensor&, float) {
  no_kernel("attention_v4");
}

}  // namespace dsinfer
