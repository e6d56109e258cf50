// CudaBackend's DeepSeek-V4 ops (the indexer's top-k is in cuda_backend_dsa.cpp, beside V3.2's): the
// hyper-connections, the hash layers' expert ids (from the step's device token ids, so async scheduling's fed
// tokens route right) and weights, the compressor's pooling and compressed-row writes and the shared-KV
// attention with sinks. Host-side checks with the CPU reference's errors, host lists (the closing compressor
// rows of prefill steps through the backend's device mirrors, host expert ids), then the launches of
// v4_kernels.h. A decode step's closing compressor rows are found by the kernel from the device positions, so
// a DeepSeek-V4 decode step replays from a CUDA graph.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_tensor.h"
#include "backend/cuda/device_args.h"
#include "backend/cuda/plan_checks.h"
#include "backend/cuda/v4_kernels.h"
#include "core/dtype.h"
#include "core/error.h"

namespace dsinfer {

using cuda::cache_view;
using cuda::check_slots;
using cuda::dev_bf16;
using cuda::dev_f32;

namespace {

// A float32 parameter on the GPU (loaded through prepare_weight_f32) of `numel` values.
const float* dev_param(const Tensor& p, int64_t numel, const char* op, const char* what) {
  DSI_CHECK(p.numel() == numel, op, ": ", what, " has ", p.numel(), " values, expected ", numel);
  DSI_CHECK(p.device() == Device::kCuda && p.dtype() == DType::F32, op, ": ", what,
            " must be a float32 CUDA tensor (loaded through prepare_weight_f32), got ", dtype_name(p.dtype()),
            " on ", device_name(p.device()));
  return p.data<float>();
}

Tensor device_f32(const Shape& shape) {
  return Tensor::empty_on(Device::kCuda, DType::F32, shape);
}

// A hyper-connection's checked inputs and its mixing logits, launched: streams x [T, n, H], fn [M, n H], base
// [M] and scale [3] (the head: M = n, scale [1]) float32 on the GPU; mixes [T, M].
struct HcMixes {
  const float* x = nullptr;
  const float* fn = nullptr;
  const float* base = nullptr;
  const float* scale = nullptr;
  Tensor mixes;  // [T, M]
  int64_t T = 0, n = 0, H = 0, M = 0;
};

// The checked weights of a hyper-connection over streams of shape [T, n, H]; m.x and m.mixes unset.
HcMixes hc_mix_weights(const Shape& streams, const HyperConnWeights& w, bool head, const char* op) {
  DSI_CHECK(streams.size() == 3, op, ": expected streams [T, n, H], got ", shape_str(streams));
  HcMixes m;
  m.T = streams[0];
  m.n = streams[1];
  m.H = streams[2];
  const int64_t M = head ? m.n : (2 + m.n) * m.n, scales = head ? 1 : 3;
  DSI_CHECK(w.fn.ndim() == 2 && w.fn.dim(0) == M && w.base.numel() == M && w.scale.numel() == scales, op,
            ": weights for ", w.fn.ndim() == 2 ? w.fn.dim(0) : 0, " mixes, ", m.n, " streams need ", M);
  DSI_CHECK(w.fn.dim(1) == m.n * m.H, "hyper-connection: fn expects ", w.fn.dim(1), " inputs, streams have ",
            m.n * m.H);
  DSI_CHECK(m.n <= cuda::kMaxHyperStreams, op, ": ", m.n, " streams (the GPU kernel takes at most ",
            cuda::kMaxHyperStreams, ")");
  m.fn = dev_param(w.fn, M * m.n * m.H, op, "fn");
  m.base = dev_param(w.base, M, op, "base");
  m.scale = dev_param(w.scale, scales, op, "scale");
  m.M = M;
  return m;
}

// A hyper-connection's checked inputs and its mixing logits, launched, for streams x.
HcMixes hc_mixes(const Tensor& x, const HyperConnWeights& w, bool head, float norm_eps, const char* op) {
  HcMixes m = hc_mix_weights(x.shape(), w, head, op);
  m.x = dev_f32(x, op, "x");
  m.mixes = device_f32({m.T, m.M});
  cuda::launch_hc_mixes(m.x, m.fn, m.mixes.data<float>(), m.T, m.n * m.H, m.M, norm_eps);
  return m;
}

// The one-launch pre-step (cuda::launch_hc_pre_fused) for m's weights and a's streams (and, with a.y,
// hc_post's inputs; the new streams then go to *streams [T, n, H]): allocates out [T, H], post [T, n], comb
// [T, n, n] and launches, or returns false (nothing allocated or launched) where the fused kernel does not
// take the shape.
bool launch_hc_fused(const HcMixes& m, cuda::HcFusedArgs a, int64_t iters, float hc_eps, float norm_eps,
                     Tensor* out, Tensor* post, Tensor* comb, Tensor* streams = nullptr) {
  a.fn = m.fn;
  a.base = m.base;
  a.scale = m.scale;
  a.H = static_cast<int>(m.H);
  a.iters = iters;
  a.hc_eps = hc_eps;
  a.norm_eps = norm_eps;
  if (!cuda::hc_pre_fused_supported(m.T, m.n, m.H, m.M, a)) return false;
  if (a.y != nullptr) {
    *streams = device_f32({m.T, m.n, m.H});  // [T, n, H]
    a.streams = streams->data<float>();
  }
  *out = device_f32({m.T, m.H});        // [T, H]
  *post = device_f32({m.T, m.n});       // [T, n]
  *comb = device_f32({m.T, m.n, m.n});  // [T, n, n]
  a.out = out->data<float>();
  a.post_out = post->data<float>();
  a.comb_out = comb->data<float>();
  cuda::launch_hc_pre_fused(a, m.T, m.n, m.H, m.M);
  return true;
}

// Every listed window has all its tokens cached, within its sequence's blocks.
void check_closed_windows(const BatchPlan& plan, const CompressedRows& rows, int64_t ratio, const char* op) {
  DSI_CHECK(rows.seqs.size() == rows.rows.size(), op, ": ", rows.seqs.size(), " sequences for ",
            rows.rows.size(), " rows");
  for (size_t i = 0; i < rows.size(); ++i) {
    DSI_CHECK(rows.seqs[i] >= 0 && rows.seqs[i] < plan.num_seqs() && rows.rows[i] >= 0 &&
                  (rows.rows[i] + 1) * ratio <= plan.context_lens[rows.seqs[i]],
              op, ": window ", rows.rows[i], " of sequence ", rows.seqs[i], " is not closed");
    const int32_t s = rows.seqs[i];
    const int64_t blocks = plan.block_table_indptr[s + 1] - plan.block_table_indptr[s];
    DSI_CHECK((rows.rows[i] + 1) * ratio <= blocks * plan.block_size, op, ": window ", rows.rows[i],
              " of sequence ", s, " is past its ", blocks, " blocks");
  }
}

// Every sequence of the plan adds exactly one token (token i is sequence i's).
bool one_token_each(const BatchPlan& plan) {
  if (plan.num_seqs() == 0 || plan.num_tokens() != plan.num_seqs()) return false;
  for (int32_t s = 0; s <= plan.num_seqs(); ++s)
    if (plan.cu_seqlens[s] != s) return false;
  return true;
}

cuda::HashScoring hash_scoring(const std::string& s) {
  if (s == "softmax") return cuda::HashScoring::kSoftmax;
  if (s == "sigmoid") return cuda::HashScoring::kSigmoid;
  if (s == "sqrtsoftplus") return cuda::HashScoring::kSqrtSoftplus;
  fail("moe_weights_for: unsupported scoring function ", s);
}

// I32 ids [T, k] on the GPU: a host table is checked against [0, E) and uploaded (a device one is trusted).
Tensor device_ids(const Tensor& ids, int64_t E, const char* op) {
  DSI_CHECK(ids.dtype() == DType::I32 && ids.ndim() == 2, op, ": ids must be I32 [T, k], got ",
            dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  if (!ids.is_cpu()) return ids;
  for (int64_t i = 0; i < ids.numel(); ++i) {
    const int32_t e = ids.data<int32_t>()[i];
    DSI_CHECK(e >= 0 && e < E, op, ": expert id ", e, " out of range [0, ", E, ")");
  }
  return cuda::to_device(ids);
}

}  // namespace

Tensor CudaBackend::norm_rope_write_kv(const Tensor& q, const Tensor& kv, const Tensor& q_norm,
                                       const Tensor& kv_norm, float eps, const RopeTable& table,
                                       KvCache& cache, int64_t layer, const BatchPlan& plan) {
  // q [T, H, D], kv [T, D] -> roped q [T, H, D]; kv's row to cache layer `layer`
  const char* op = "norm_rope_write_kv";
  const cuda::DeviceCacheView view = cache_view(cache, layer, op);
  const int64_t T = plan.num_tokens(), R = table.rope_dim;
  DSI_CHECK(q.ndim() == 3 && q.dim(0) == T && kv.numel() == T * q.dim(2), op, ": q ", shape_str(q.shape()),
            " and kv ", shape_str(kv.shape()), " for ", T, " tokens");
  const int64_t H = q.dim(1), D = q.dim(2);
  DSI_CHECK(q_norm.numel() == D && kv_norm.numel() == D, op, ": norm weights of ", q_norm.numel(), " and ",
            kv_norm.numel(), " values for rows of ", D);
  DSI_CHECK(view.width == D, op, ": cache rows of ", view.width, " values for K = V rows of ", D);
  DSI_CHECK(R % 2 == 0 && R <= D && static_cast<int64_t>(table.inv_freq.size()) == R / 2, op,
            ": rope table of ", table.inv_freq.size(), " frequencies for rope_dim ", R, " and head dim ", D);
  DSI_CHECK(static_cast<int64_t>(plan.positions.size()) == T, op, ": positions for ", T, " tokens");
  check_slots(cache, plan, op);
  Tensor out = device_f32({T, H, D});  // [T, H, D]
  if (T == 0) return out;
  cuda::launch_norm_rope_write_kv(
      dev_f32(q, op, "q"), dev_f32(kv, op, "kv"), dev_bf16(q_norm, op, "q_norm"),
      dev_bf16(kv_norm, op, "kv_norm"), out.data<float>(), view,
      device_array(plan.slot_mapping, slot_mapping_), device_array(plan.positions, positions_),
      R ? inv_freq_.upload(table.inv_freq) : nullptr, T, H, D, R, table.attention_scaling, eps);
  return out;
}

Tensor CudaBackend::hc_expand(const Tensor& x, int64_t n) {
  // x [T, H] -> [T, n, H]
  DSI_CHECK(x.ndim() == 2, "hc_expand: expected [T, H], got ", shape_str(x.shape()));
  DSI_CHECK(n >= 1, "hc_expand: ", n, " streams");
  const int64_t T = x.dim(0), H = x.dim(1);
  Tensor out = device_f32({T, n, H});  // [T, n, H]
  cuda::launch_hc_expand(dev_f32(x, "hc_expand", "x"), out.data<float>(), T, n, H);
  return out;
}

Tensor CudaBackend::hc_pre(const Tensor& x, const HyperConnWeights& w, int64_t iters, float hc_eps,
                           float norm_eps, Tensor* post, Tensor* comb) {
  // x [T, n, H] -> collapsed [T, H], post [T, n], comb [T, n, n]
  if (options_.hc_fused) {
    cuda::HcFusedArgs a;
    a.x = dev_f32(x, "hc_pre", "x");
    Tensor out;
    if (launch_hc_fused(hc_mix_weights(x.shape(), w, /*head=*/false, "hc_pre"), a, iters, hc_eps, norm_eps,
                        &out, post, comb))
      return out;
  }
  const HcMixes m = hc_mixes(x, w, /*head=*/false, norm_eps, "hc_pre");
  Tensor out = device_f32({m.T, m.H});  // [T, H]
  *post = device_f32({m.T, m.n});       // [T, n]
  *comb = device_f32({m.T, m.n, m.n});  // [T, n, n]
  cuda::launch_hc_pre_finish(m.x, m.mixes.data<float>(), m.base, m.scale, out.data<float>(),
                             post->data<float>(), comb->data<float>(), m.T, m.n, m.H, iters, hc_eps);
  return out;
}

Tensor CudaBackend::hc_post(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb) {
  // x [T, n, H], y [T, H], post [T, n], comb [T, n, n] -> [T, n, H]
  DSI_CHECK(x.ndim() == 3, "hc_post: expected streams [T, n, H], got ", shape_str(x.shape()));
  const int64_t T = x.dim(0), n = x.dim(1), H = x.dim(2);
  DSI_CHECK(y.numel() == T * H && post.numel() == T * n && comb.numel() == T * n * n,
            "hc_post: shape mismatch");
  Tensor out = device_f32({T, n, H});  // [T, n, H]
  cuda::launch_hc_post(dev_f32(x, "hc_post", "x"), dev_f32(y, "hc_post", "y"),
                       dev_f32(post, "hc_post", "post"), dev_f32(comb, "hc_post", "comb"), out.data<float>(),
                       T, n, H);
  return out;
}

Tensor CudaBackend::hc_post_pre(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb,
                                const HyperConnWeights& w, int64_t iters, float hc_eps, float norm_eps,
                                Tensor* streams, Tensor* post_out, Tensor* comb_out) {
  // x [T, n, H], y [T, H], post [T, n], comb [T, n, n] -> new streams [T, n, H], collapsed [T, H], the next
  // post [T, n] and comb [T, n, n]. post, comb and x are read by the first launch, before *post_out,
  // *comb_out and *streams (which may be the same tensors) are replaced.
  if (options_.hc_fused) {
    const char* op = "hc_post_pre";
    const HcMixes m = hc_mix_weights(x.shape(), w, /*head=*/false, op);
    DSI_CHECK(y.numel() == m.T * m.H && post.numel() == m.T * m.n && comb.numel() == m.T * m.n * m.n, op,
              ": shape mismatch (streams ", shape_str(x.shape()), ", y ", shape_str(y.shape()), ", post ",
              shape_str(post.shape()), ", comb ", shape_str(comb.shape()), ")");
    cuda::HcFusedArgs a;
    a.x = dev_f32(x, op, "x");
    a.y = dev_f32(y, op, "y");
    a.post = dev_f32(post, op, "post");
    a.comb = dev_f32(comb, op, "comb");
    Tensor out, s, p, c;
    if (launch_hc_fused(m, a, iters, hc_eps, norm_eps, &out, &p, &c, &s)) {
      *streams = std::move(s);
      *post_out = std::move(p);
      *comb_out = std::move(c);
      return out;
    }
  }
  return Backend::hc_post_pre(x, y, post, comb, w, iters, hc_eps, norm_eps, streams, post_out, comb_out);
}

Tensor CudaBackend::hc_head(const Tensor& x, const HyperConnWeights& w, float hc_eps, float norm_eps) {
  // x [T, n, H] -> [T, H]
  const HcMixes m = hc_mixes(x, w, /*head=*/true, norm_eps, "hc_head");
  Tensor out = device_f32({m.T, m.H});  // [T, H]
  cuda::launch_hc_head_finish(m.x, m.mixes.data<float>(), m.base, m.scale, out.data<float>(), m.T, m.n, m.H,
                              hc_eps);
  return out;
}

Tensor CudaBackend::prepare_table(Tensor host_i32) {
  DSI_CHECK(host_i32.is_cpu() && host_i32.dtype() == DType::I32, "prepare_table: expected a host I32 tensor");
  return cuda::to_device(host_i32);
}

Tensor CudaBackend::table_rows(const Tensor& table, const std::vector<int32_t>& ids) {
  // table [V, k] I32 (device), ids [T] -> [T, k] I32
  DSI_CHECK(table.ndim() == 2 && table.dtype() == DType::I32 && table.device() == Device::kCuda,
            "table_rows: the table must be an I32 CUDA tensor [V, k] (loaded through prepare_table)");
  const int64_t V = table.dim(0), K = table.dim(1), T = static_cast<int64_t>(ids.size());
  for (int32_t id : ids)
    DSI_CHECK(id >= 0 && id < V, "token id ", id, " is outside the vocabulary [0, ", V, ")");
  Tensor out = Tensor::empty_on(Device::kCuda, DType::I32, {T, K});  // [T, k]
  if (T == 0 || K == 0) return out;
  cuda::launch_table_rows(table.data<int32_t>(), device_array(ids, ids_), out.data<int32_t>(), T, K, V);
  return out;
}

Tensor CudaBackend::moe_weights_for(const Tensor& x, const Tensor& router, const Tensor& ids,
                                    const RoutingParams& p) {
  // x [T, H], router [E, H] (bf16), ids [T, k] I32 -> weights [T, k]
  DSI_CHECK(x.ndim() == 2 && router.ndim() == 2, "moe_weights_for: x ", shape_str(x.shape()), " and router ",
            shape_str(router.shape()), " must be 2-D");
  const int64_t T = x.dim(0), H = x.dim(1), E = router.dim(0);
  DSI_CHECK(router.dim(1) == H, "moe_weights_for: router expects ", router.dim(1), " features, got ", H);
  DSI_CHECK(ids.ndim() == 2 && ids.dim(0) == T, "moe_weights_for: ids must be I32 [T, k]");
  DSI_CHECK(E <= cuda::kMaxHashExperts, "moe_weights_for: ", E, " experts (the GPU kernel takes at most ",
            cuda::kMaxHashExperts, ")");
  const cuda::HashScoring scoring = hash_scoring(p.scoring);
  const Tensor dids = device_ids(ids, E, "moe_weights_for");
  const int64_t K = ids.dim(1);
  Tensor weights = device_f32({T, K});  // [T, k]
  Tensor logits = device_f32({T, E});   // [T, E] scratch
  cuda::launch_moe_weights_for(dev_f32(x, "moe_weights_for", "x"),
                               cuda::dev_bf16(router, "moe_weights_for", "router"), dids.data<int32_t>(),
                               logits.data<float>(), weights.data<float>(), T, H, E, K, scoring,
                               p.norm_topk_prob, p.routed_scaling_factor);
  return weights;
}

Tensor CudaBackend::compress_rows(const KvCache& cache, int64_t in_layer, const BatchPlan& plan,
                                  const CompressedRows& rows, const Tensor& ape, int64_t ratio,
                                  bool overlap) {
  // cache rows of in_layer [kv (c D) | gate (c D)] -> pooled [R, D]
  const cuda::DeviceCacheView in = cache_view(cache, in_layer, "compress_rows");
  const int64_t c = overlap ? 2 : 1, width = in.width, D = width / (2 * c);
  const int64_t R = static_cast<int64_t>(rows.size());
  DSI_CHECK(width == 2 * c * D && D > 0, "compress_rows: cache rows of ", width,
            " values are not [kv | gate]");
  DSI_CHECK(ratio > 0, "compress_rows: ratio must be positive");
  const float* ape_d = dev_param(ape, ratio * c * D, "compress_rows", "ape");
  check_closed_windows(plan, rows, ratio, "compress_rows");
  Tensor out = device_f32({R, D});  // [R, D]
  if (R == 0) return out;
  bool lone_call = false;
  cuda::CompressRowsArgs a;
  a.in = in;
  a.plan = plan_view(plan, lone_call);
  a.seqs = device_array(rows.seqs, comp_seqs_);  // the same lists for every layer of a step: one upload
  a.rows = device_array(rows.rows, comp_rows_);
  a.ape = ape_d;
  a.R = R;
  a.D = D;
  a.ratio = ratio;
  a.overlap = overlap;
  a.out = out.data<float>();
  cuda::launch_compress_rows(a);
  if (lone_call) step_.clear_host();
  return out;
}

void CudaBackend::write_compressed(KvCache& cache, int64_t layer, const BatchPlan& plan,
                                   const CompressedRows& rows, const Tensor& values) {
  // values [R, W] -> cache layer `layer`, row i in the slot of position rows[i] of sequence seqs[i]
  const cuda::DeviceCacheView view = cache_view(cache, layer, "write_compressed");
  const int64_t W = view.width, R = static_cast<int64_t>(rows.size());
  DSI_CHECK(values.numel() == R * W, "write_compressed: ", values.numel(), " values for ", R, " rows of ", W);
  DSI_CHECK(rows.seqs.size() == rows.rows.size(), "write_compressed: ", rows.seqs.size(), " sequences for ",
            rows.rows.size(), " rows");
  if (R == 0) return;
  std::vector<int64_t> slots(static_cast<size_t>(R));
  for (int64_t i = 0; i < R; ++i) {
    const int32_t s = rows.seqs[i];
    DSI_CHECK(s >= 0 && s < plan.num_seqs() && rows.rows[i] >= 0, "write_compressed: row ", rows.rows[i],
              " of sequence ", s);
    const int64_t blocks = plan.block_table_indptr[s + 1] - plan.block_table_indptr[s];
    DSI_CHECK(rows.rows[i] < blocks * plan.block_size, "write_compressed: row ", rows.rows[i],
              " of sequence ", s, " is past its ", blocks, " blocks");
    slots[i] = plan.slot_of(s, rows.rows[i]);
  }
  cuda::launch_write_kv(view, device_array(slots, comp_slots_), dev_f32(values, "write_compressed", "values"),
                        W, nullptr, 0, R);
}

void CudaBackend::compress_close(KvCache& cache, const BatchPlan& plan, const CompressCloseSpec& spec) {
  // cache rows of spec.in_layer [kv (c D) | gate (c D)] -> rows [D] of spec.out_layer
  DSI_CHECK(spec.ape && spec.norm && spec.rope, "compress_close: the spec needs ape, norm and rope");
  const cuda::DeviceCacheView in = cache_view(cache, spec.in_layer, "compress_close");
  const cuda::DeviceCacheView out = cache_view(cache, spec.out_layer, "compress_close");
  const int64_t c = spec.overlap ? 2 : 1, D = in.width / (2 * c), rd = spec.rope->rope_dim;
  DSI_CHECK(in.width == 2 * c * D && D > 0, "compress_close: cache rows of ", in.width,
            " values are not [kv | gate]");
  DSI_CHECK(out.width == D, "compress_close: compressed rows of ", out.width, " values for pooled rows of ",
            D);
  DSI_CHECK(spec.ratio > 0, "compress_close: ratio must be positive");
  DSI_CHECK(D % 4 == 0 && D <= cuda::kMaxV4HeadDim, "compress_close: rows of ", D,
            " values (the GPU kernel takes multiples of 4 up to ", cuda::kMaxV4HeadDim, ")");
  DSI_CHECK(rd >= 0 && rd <= D && rd % 2 == 0 && static_cast<int64_t>(spec.rope->inv_freq.size()) == rd / 2,
            "compress_close: a rope table of ", spec.rope->inv_freq.size(), " frequencies for ", rd,
            " rope dims of ", D);
  DSI_CHECK(spec.norm->numel() == D, "compress_close: norm has ", spec.norm->numel(), " values for rows of ",
            D);
  cuda::check_positions(plan, "compress_close");
  cuda::CompressCloseArgs a;
  CompressedRows rows;
  if (one_token_each(plan)) {
    a.R = plan.num_tokens();  // the kernel finds which tokens close a row (no host list: capturable)
  } else {
    rows = v4_closing_rows(plan, spec.ratio);
    check_closed_windows(plan, rows, spec.ratio, "compress_close");
    a.R = static_cast<int64_t>(rows.size());
    if (a.R == 0) return;
  }
  a.ape = dev_param(*spec.ape, spec.ratio * c * D, "compress_close", "ape");
  a.norm = cuda::dev_bf16(*spec.norm, "compress_close", "the norm weight");
  bool lone_call = false;
  a.in = in;
  a.out = out;
  a.plan = plan_view(plan, lone_call);
  if (!rows.seqs.empty()) {
    a.seqs = device_array(rows.seqs, comp_seqs_);
    a.rows = device_array(rows.rows, comp_rows_);
  }
  a.inv_freq = rd > 0 ? inv_freq_.upload(spec.rope->inv_freq) : nullptr;
  a.rope_scaling = spec.rope->attention_scaling;
  a.eps = spec.eps;
  a.D = D;
  a.ratio = spec.ratio;
  a.rope_dim = rd;
  a.overlap = spec.overlap;
  cuda::launch_compress_close(a);
  if (lone_call) step_.clear_host();
}

Tensor CudaBackend::attention_v4(const Tensor& q, const KvCache& cache, int64_t window_layer, int64_t window,
                                 int64_t comp_layer, int64_t ratio, const Tensor& selected,
                                 const BatchPlan& plan, const Tensor& sinks, float scale) {
  return run_attention_v4(q, cache, window_layer, window, comp_layer, ratio, selected, plan, sinks, scale,
                          nullptr);
}

Tensor CudaBackend::attention_v4_unrope(const Tensor& q, const KvCache& cache, int64_t window_layer,
                                        int64_t window, int64_t comp_layer, int64_t ratio,
                                        const Tensor& selected, const BatchPlan& plan, const Tensor& sinks,
                                        float scale, const RopeTable& table) {
  return run_attention_v4(q, cache, window_layer, window, comp_layer, ratio, selected, plan, sinks, scale,
                          &table);
}

Tensor CudaBackend::run_attention_v4(const Tensor& q, const KvCache& cache, int64_t window_layer,
                                     int64_t window, int64_t comp_layer, int64_t ratio,
                                     const Tensor& selected, const BatchPlan& plan, const Tensor& sinks,
                                     float scale, const RopeTable* unrope) {
  // q [T, H, D] -> [T, H, D]
  DSI_CHECK(q.ndim() == 3, "attention_v4: q must be [T, H, D], got ", shape_str(q.shape()));
  const int64_t T = q.dim(0), H = q.dim(1), D = q.dim(2);
  const cuda::DeviceCacheView win = cache_view(cache, window_layer, "attention_v4");
  DSI_CHECK(win.width == D, "attention_v4: window rows of ", win.width, " values, heads of ", D);
  cuda::DeviceCacheView comp;
  if (comp_layer >= 0) {
    comp = cache_view(cache, comp_layer, "attention_v4");
    DSI_CHECK(comp.width == D, "attention_v4: compressed rows must have ", D, " values");
  }
  DSI_CHECK(D <= cuda::kMaxV4HeadDim, "attention_v4: head dim ", D, " (the GPU kernel takes at most ",
            cuda::kMaxV4HeadDim, ")");
  DSI_CHECK(window >= 1, "attention_v4: the window must be positive");
  DSI_CHECK(comp_layer < 0 || ratio >= 1, "attention_v4: compressed rows need a positive ratio");
  const float* sinks_d = dev_param(sinks, H, "attention_v4", "sink logits");
  DSI_CHECK(T == plan.num_tokens(), "attention_v4: ", T, " query tokens for a plan of ", plan.num_tokens());
  const int64_t K = selected ? selected.dim(1) : 0;
  DSI_CHECK(!selected || (selected.dtype() == DType::I32 && selected.ndim() == 2 && selected.dim(0) == T),
            "attention_v4: bad selection");
  cuda::check_positions(plan, "attention_v4");
  const bool rotate = unrope && unrope->rope_dim >= 2;  // (rope leaves a rope_dim under 2 alone)
  if (rotate) {
    const int64_t R = unrope->rope_dim;
    DSI_CHECK(R % 2 == 0 && R <= D && static_cast<int64_t>(unrope->inv_freq.size()) == R / 2,
              "attention_v4_unrope: rope table of ", unrope->inv_freq.size(), " frequencies for rope_dim ", R,
              " and head dim ", D);
    DSI_CHECK(static_cast<int64_t>(plan.positions.size()) == T, "attention_v4_unrope: positions for ", T,
              " tokens");
  }
  Tensor sel = selected;
  if (selected && selected.is_cpu() && K > 0) sel = cuda::to_device(selected);
  Tensor out = device_f32({T, H, D});  // [T, H, D]
  if (T == 0 || H == 0) return out;
  bool lone_call = false;
  cuda::AttentionV4Args a;
  a.q = dev_f32(q, "attention_v4", "q");
  a.window_rows = win;
  if (!selected || K > 0) a.comp = comp;  // an empty selection: no compressed rows
  a.plan = plan_view(plan, lone_call);
  a.selected = selected && K > 0 ? sel.data<int32_t>() : nullptr;
  a.K = K;
  a.sinks = sinks_d;
  a.T = T;
  a.H = H;
  a.D = D;
  a.window = window;
  a.ratio = std::max<int64_t>(ratio, 1);  // unused without compressed rows (sliding layers give 0)
  a.scale = scale;
  a.out = out.data<float>();
  if (rotate) {
    a.unrope_inv_freq = inv_freq_.upload(unrope->inv_freq);
    a.unrope_dim = static_cast<int>(unrope->rope_dim);
    a.unrope_scaling = unrope->attention_scaling;
  }
  a.splits = cuda::attention_v4_splits(T, H);
  Tensor partial;  // the splits' softmax states, merged into out
  if (a.splits > 1) {
    partial = device_f32({cuda::attention_v4_partial_floats(T, H, D, a.splits)});
    a.partial = partial.data<float>();
  }
  cuda::launch_attention_v4(a);
  if (lone_call) step_.clear_host();
  return out;
}

}  // namespace dsinfer
