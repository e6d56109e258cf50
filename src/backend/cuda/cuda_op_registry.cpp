// The CUDA op support table (see cuda_op_registry.h). Kernel names are the launchers of dsinfer_cuda that
// CudaBackend's ops call. When a kernel lands for an op (or a fused op gets its own kernel), edit its row
// here in the same commit: `dsinfer check`, --device auto and --device cuda all follow this table.
#include "backend/cuda/cuda_op_registry.h"

#include <algorithm>

#include "core/error.h"

namespace dsinfer::cuda {

const std::vector<CudaOpSupport>& cuda_op_support() {
  static const std::vector<CudaOpSupport> table = {
      // ---- dense ops (cuda_backend*.cpp). Linear layers: GEMV kernels for <= 8 rows (decode), cuBLASLt
      // above (bf16 activations; hi/lo split with DSINFER_CUDA_GEMM=split). ----
      {"embed", {"launch_embed"}, {}, {}, ""},
      {"rms_norm", {"launch_rms_norm"}, {}, {}, ""},
      {"linear", {"launch_gemv", "linear_bf16 (cuBLASLt)"}, {}, {}, ""},
      {"add_inplace", {"launch_add_inplace"}, {}, {}, ""},
      {"rope", {"launch_rope"}, {}, {}, ""},
      {"mlp",
       {"launch_gemv_swiglu", "launch_gemv", "gemm_bf16 (cuBLASLt)", "launch_silu_mul_bf16",
        "linear_bf16 (cuBLASLt)", "launch_silu_mul"},
       {},
       {},
       ""},
      {"write_kv", {"launch_write_kv"}, {}, {}, ""},
      {"attention_gqa",
       {"launch_attention_decode", "launch_attention_flash", "launch_attention_gqa"},
       {},
       {},
       ""},
      {"gather_rows", {"launch_gather_rows"}, {}, {}, ""},
      // ---- fused ops (own kernels; Backend's composed defaults otherwise) ----
      {"norm_linears",
       {"launch_gemv (fused RMSNorm)", "launch_rms_norm_bf16", "gemm_bf16 (cuBLASLt)",
        "linear_bf16 (cuBLASLt)"},
       {},
       {"rms_norm", "linear"},
       ""},
      {"linear_residual",
       {"launch_gemv (accumulate)", "linear_bf16 (cuBLASLt, accumulate)"},
       {},
       {"linear", "add_inplace"},
       ""},
      {"norm_mlp_residual",
       {"launch_gemv_swiglu (fused RMSNorm)", "launch_gemv (accumulate)", "launch_rms_norm_bf16",
        "gemm_bf16 (cuBLASLt)", "launch_silu_mul_bf16"},
       {},
       {"rms_norm", "mlp", "add_inplace"},
       ""},
      {"rope_write_kv", {"launch_rope_write_kv"}, {}, {"rope", "write_kv"}, ""},
      // pure decode steps (warp-kernel shapes): the rope and cache write inside the decode attention kernel
      {"rope_attention_gqa",
       {"launch_attention_decode (fused rope)", "launch_rope_write_kv", "launch_attention_flash",
        "launch_attention_gqa"},
       {},
       {"rope_write_kv", "attention_gqa"},
       ""},
      {"mla_rope_write_kv", {"launch_mla_rope_write_kv"}, {}, {"rms_norm", "rope", "write_kv"}, ""},
      // decode sizes: the cache write and the W_UK GEMV in one kernel; else mla_rope_write_kv + head_matmul
      {"mla_prepare",
       {"launch_mla_prepare", "launch_mla_rope_write_kv", "launch_head_gemv_tiled (decode)",
        "launch_head_matmul", "launch_head_matmul_mma", "head_linear_bf16"},
       {},
       {"mla_rope_write_kv", "head_matmul"},
       ""},
      // ---- sampling on the GPU (greedy/temperature/top-k/top-p/min-p/penalties) ----
      {"sample", {"launch_sample_rows"}, {}, {}, "host sampler over the logits copied back"},
      {"sample_async", {"launch_sample_rows"}, {}, {}, "host sampler over the logits copied back"},
      // async scheduling: the previous sampling call's ids patched into the step plan's device token ids
      {"feed_sampled_tokens", {"launch_feed_sampled_tokens"}, {}, {}, "host ids written into the plan"},
      // ---- DeepSeek MLA / MoE (V2, V3) ----
      {"attention_mla",
       {"launch_attention_mla (CUDA cores; tensor cores for a bf16 cache with R 512, P 64)",
        "launch_attention_mla_tc", "launch_attention_mla_prefill"},
       {"launch_attention_mla (CUDA cores; tensor cores for a bf16 cache with R 512, P 64)",
        "launch_attention_mla_tc",
        "launch_attention_mla_wgmma_tma (decode: one wave, 8+ tiles per block or 64+ heads)",
        "launch_attention_mla_tc_v2 (other large batches)", "launch_attention_mla_prefill"},
       {},
       ""},
      // decode sizes with a split merged by the combine kernel: the merge + W_UV kernel in its place
      {"attention_mla_uv",
       {"launch_attention_mla (+ launch_mla_merge_uv at decode sizes)", "launch_attention_mla_tc",
        "launch_attention_mla_prefill", "launch_head_gemv_tiled (decode)", "launch_head_matmul",
        "launch_head_matmul_mma", "head_linear_bf16"},
       {},
       {"attention_mla", "head_matmul"},
       ""},
      {"head_matmul",
       {"launch_head_gemv_tiled (decode)", "launch_head_matmul", "launch_head_matmul_mma",
        "head_linear_bf16"},
       {},
       {},
       ""},
      {"moe_route", {"launch_moe_route"}, {}, {}, ""},
      // decode sizes: one kernel (norm, routing, the experts' permutation); else rms_norm + moe_route
      {"norm_moe_route",
       {"launch_moe_norm_route", "launch_rms_norm", "launch_moe_route"},
       {},
       {"rms_norm", "moe_route"},
       ""},
      {"moe_experts",
       {"launch_moe_permute", "launch_moe_gate_up_stream", "launch_moe_down_stream", "launch_moe_gate_up",
        "launch_moe_down", "launch_moe_gate_up_mma", "launch_moe_down_mma", "launch_moe_x_bf16",
        "launch_moe_gate_up_grouped", "launch_moe_down_grouped", "launch_moe_combine",
        "launch_gemv_moe_gate_up (one token, units)", "launch_gemv_moe_down (one token, units)"},
       {},
       {},
       ""},
      // Shared experts: units of the streaming launches at decode sizes, else norm_mlp_residual's kernels.
      {"moe_experts_residual",
       {"launch_moe_permute", "launch_moe_gate_up_stream (+ shared units)",
        "launch_moe_down_stream (+ shared units)", "launch_moe_gate_up", "launch_moe_down",
        "launch_moe_gate_up_mma", "launch_moe_down_mma", "launch_moe_combine (accumulate, + shared rows)",
        "launch_gemv_swiglu (fused RMSNorm)", "launch_gemv", "launch_rms_norm_bf16", "gemm_bf16 (cuBLASLt)",
        "launch_gemv_moe_gate_up (one token, units)", "launch_gemv_moe_down (one token, units)"},
       {},
       {"norm_mlp_residual", "moe_experts", "add_inplace"},
       ""},
      // ---- DeepSeek-V3.2 sparse attention ----
      {"layer_norm", {"launch_layer_norm"}, {}, {}, ""},
      {"dsa_indexer_topk", {"launch_dsa_index_scores", "launch_dsa_topk"}, {}, {}, ""},
      {"attention_mla_sparse", {"launch_attention_mla (sparse positions)"}, {}, {}, ""},
      // ---- DeepSeek-V4 ----
      {"hc_expand", {"launch_hc_expand"}, {}, {}, ""},
      {"hc_pre",
       {"launch_hc_mixes", "launch_hc_pre_finish"},
       {"launch_hc_pre_fused", "launch_hc_mixes", "launch_hc_pre_finish"},
       {},
       ""},
      {"hc_post", {"launch_hc_post"}, {}, {}, ""},
      {"hc_post_pre",
       {},
       {"launch_hc_pre_fused", "launch_hc_post", "launch_hc_mixes", "launch_hc_pre_finish"},
       {"hc_post", "hc_pre"},
       ""},
      {"norm_rope_write_kv", {"launch_norm_rope_write_kv"}, {}, {"rms_norm", "rope", "write_kv"}, ""},
      {"hc_head", {"launch_hc_mixes", "launch_hc_head_finish"}, {}, {}, ""},
      {"table_rows", {"launch_table_rows"}, {}, {}, ""},
      {"moe_weights_for", {"launch_moe_weights_for"}, {}, {}, ""},
      {"compress_rows", {"launch_compress_rows"}, {}, {}, ""},
      {"write_compressed", {"launch_write_kv"}, {}, {}, ""},
      {"compress_close",
       {"launch_compress_close"},
       {},
       {"compress_rows", "rms_norm", "rope", "write_compressed"},
       ""},
      {"indexer_topk",
       {"launch_compressed_visible", "launch_dsa_index_scores", "launch_dsa_topk"},
       {},
       {},
       ""},
      {"attention_v4", {"launch_attention_v4"}, {}, {}, ""},
      {"attention_v4_unrope",
       {"launch_attention_v4 (the inverse rope in its last stores)"},
       {},
       {"attention_v4", "rope"},
       ""},
  };
  return table;
}

const CudaOpSupport& cuda_op(std::string_view op) {
  for (const CudaOpSupport& row : cuda_op_support())
    if (row.op == op) return row;
  fail("CUDA op registry: unknown backend op \"", std::string(op), "\"");
}

const char* op_coverage_name(OpCoverage c) {
  switch (c) {
    case OpCoverage::kKernel:
      return "kernel";
    case OpCoverage::kComposed:
      return "composed";
    case OpCoverage::kHostFallback:
      return "host_fallback";
    case OpCoverage::kMissing:
      return "missing";
  }
  return "missing";
}

OpCoverage cuda_op_coverage(std::string_view op) {
  const CudaOpSupport& row = cuda_op(op);
  if (!row.kernels.empty()) return OpCoverage::kKernel;
  if (!row.composed_of.empty()) {
    for (const std::string& part : row.composed_of) {
      const OpCoverage c = cuda_op_coverage(part);
      if (c == OpCoverage::kMissing || c == OpCoverage::kHostFallback) return OpCoverage::kMissing;
    }
    return OpCoverage::kComposed;
  }
  return row.host_fallback.empty() ? OpCoverage::kMissing : OpCoverage::kHostFallback;
}

std::vector<std::string> cuda_kernels_for(std::string_view op, ArchPath path) {
  const CudaOpSupport& row = cuda_op(op);
  if (path == ArchPath::kHopper && !row.hopper_kernels.empty()) return row.hopper_kernels;
  if (!row.kernels.empty()) return row.kernels;
  std::vector<std::string> out;
  for (const std::string& part : row.composed_of) {
    for (std::string& k : cuda_kernels_for(part, path)) {
      if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(std::move(k));
    }
  }
  return out;
}

const std::vector<std::string>& model_backend_ops(Arch arch) {
  // What src/model/arch/*.cpp call through the Backend (grep "b\.[a-z_]*(" there when it changes).
  static const std::vector<std::string> dense = {"embed",           "norm_linears",      "rope_attention_gqa",
                                                 "linear_residual", "norm_mlp_residual", "gather_rows",
                                                 "sample"};
  static const std::vector<std::string> mla = {"embed",
                                               "norm_linears",
                                               "rms_norm",
                                               "linear",
                                               "mla_prepare",
                                               "attention_mla_uv",
                                               "head_matmul",
                                               "moe_route",
                                               "norm_moe_route",
                                               "moe_experts_residual",
                                               "mlp",
                                               "linear_residual",
                                               "norm_mlp_residual",
                                               "gather_rows",
                                               "sample"};
  static const std::vector<std::string> v32 = [] {
    std::vector<std::string> ops = mla;
    ops.insert(ops.end() - 1, {"rope", "write_kv", "layer_norm", "dsa_indexer_topk", "attention_mla_sparse"});
    return ops;
  }();
  static const std::vector<std::string> v4 = {"embed",
                                              "rms_norm",
                                              "linear",
                                              "rope",
                                              "write_kv",
                                              "hc_expand",
                                              "hc_pre",
                                              "hc_post",
                                              "hc_post_pre",
                                              "norm_rope_write_kv",
                                              "hc_head",
                                              "head_matmul",
                                              "indexer_topk",
                                              "attention_v4",
                                              "attention_v4_unrope",
                                              "mlp",
                                              "moe_route",
                                              "moe_experts",
                                              "moe_weights_for",
                                              "compress_rows",
                                              "write_compressed",
                                              "compress_close",
                                              "norm_linears",
                                              "norm_moe_route",
                                              "moe_experts_residual",
                                              "add_inplace",
                                              "gather_rows",
                                              "table_rows",
                                              "sample"};
  switch (arch) {
    case Arch::kLlama:
    case Arch::kQwen2:
      return dense;
    case Arch::kDeepseekV2:
    case Arch::kDeepseekV3:
      return mla;
    case Arch::kDeepseekV32:
      return v32;
    case Arch::kDeepseekV4:
      return v4;
  }
  return dense;
}

std::vector<std::string> ops_without_cuda_kernel(Arch arch) {
  std::vector<std::string> out;
  for (const std::string& op : model_backend_ops(arch))
    if (cuda_op_coverage(op) == OpCoverage::kMissing) out.push_back(op);
  return out;
}

}  // namespace dsinfer::cuda
