// CudaGraphModel: bucketing, padding, capture and replay of decode steps.
#include "backend/cuda/cuda_graph_model.h"

#include <algorithm>
#include <chrono>

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/batch_bucket.h"
#include "backend/cuda/device_mirror.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"
#include "core/log.h"

namespace dsinfer {

namespace {

bool decode_only(const BatchPlan& plan) {
  if (plan.num_seqs() == 0 || plan.num_tokens() != plan.num_seqs()) return false;
  if (static_cast<int32_t>(plan.logits_rows.size()) != plan.num_tokens()) return false;
  for (int32_t i = 0; i < plan.num_tokens(); ++i)
    if (plan.logits_rows[i] != i) return false;
  return true;
}

// The attention kernels' own bucket of the longest context (so their launch shape is the graph's).
int32_t context_bucket(const BatchPlan& plan) {
  int32_t longest = 1;
  for (int32_t c : plan.context_lens) longest = std::max(longest, c);
  return static_cast<int32_t>(cuda::attention_max_context_bucket(longest));
}

}  // namespace

std::vector<int32_t> graph_batch_buckets(int32_t max_batch) {
  DSI_CHECK(max_batch > 0, "CUDA graphs need a positive max_batch");
  // 1, 2, 4, 8, then every 8 up to 64, then every 32: padding costs at most ~1/8 of a large step.
  std::vector<int32_t> buckets;
  for (int32_t b : {1, 2, 4}) buckets.push_back(b);
  for (int32_t b = 8; b <= 64; b += 8) buckets.push_back(b);
  for (int32_t b = 96; b < max_batch + 32; b += 32) buckets.push_back(b);
  while (buckets.size() > 1 && buckets[buckets.size() - 2] >= max_batch) buckets.pop_back();
  // Kernels choose their launch from next_pow2(batch) (batch_bucket.h): a padded batch must not round
  // further, or replayed and eager steps would split their sums differently.
  for (int32_t t = 1, i = 0; t <= buckets.back(); ++t) {
    while (buckets[i] < t) ++i;
    DSI_CHECK(buckets[i] <= cuda::next_pow2(t), "CUDA graph bucket ", buckets[i], " for ", t,
              " sequences rounds past ", cuda::next_pow2(t));
  }
  return buckets;
}

CudaGraphModel::CudaGraphModel(std::unique_ptr<Model> inner, CudaBackend& backend, CudaGraphOptions options)
    : inner_(std::move(inner)), backend_(backend), options_(options) {
  buckets_ = graph_batch_buckets(options_.max_batch);
}

CudaGraphModel::~CudaGraphModel() {
  drop_graphs();
}

void CudaGraphModel::drop_graphs() {
  for (auto& [key, g] : graphs_) cuda::destroy_graph(g.exec);
  graphs_.clear();
  failed_.clear();  // with the graphs gone their pool may have room: every key is tried again
}

Tensor CudaGraphModel::forward(const BatchPlan& plan, KvCache& cache) {
  return backend_.to_host(forward_device(plan, cache));
}

BatchPlan CudaGraphModel::padded(const BatchPlan& plan, int32_t bucket, const KvCache& cache) const {
  BatchPlan p = plan;
  const int32_t scratch = static_cast<int32_t>(cache.num_blocks()) - 1;
  for (int32_t s = plan.num_seqs(); s < bucket; ++s) {
    p.token_ids.push_back(0);
    p.positions.push_back(0);
    p.cu_seqlens.push_back(p.cu_seqlens.back() + 1);
    p.context_lens.push_back(1);
    p.block_table.push_back(scratch);
    p.block_table_indptr.push_back(static_cast<int32_t>(p.block_table.size()));
    p.slot_mapping.push_back(static_cast<int64_t>(scratch) * plan.block_size);
    p.logits_rows.push_back(s);
    p.seq_ids.push_back(-1 - s);
    if (!p.prompt_lens.empty()) p.prompt_lens.push_back(1);
    if (!p.prev_sample_rows.empty()) p.prev_sample_rows.push_back(-1);
  }
  return p;
}

BatchPlan CudaGraphModel::padding_only(int32_t bucket, const KvCache& cache) const {
  BatchPlan none;
  none.block_size = cache.block_size();
  none.cu_seqlens = {0};
  none.block_table_indptr = {0};
  return padded(none, bucket, cache);
}

CudaGraphModel::Graph* CudaGraphModel::capture(const BatchPlan& padded_plan, KvCache& cache,
                                               std::pair<int32_t, int32_t> key) {
  // Warm up once eagerly (cuBLASLt plans, workspaces, mirrors and the allocator's blocks all settle),
  // then record the same step.
  const auto start = std::chrono::steady_clock::now();
  auto add_time = [&] {
    capture_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  backend_.stage_plan(padded_plan);
  inner_->forward_device(padded_plan, cache);
  // A fresh pool takes the largest capture's working set (profile_graph_memory) in one range up front.
  if (graph_reserve_ > 0 && cuda::graph_pool_bytes() == 0) cuda::graph_pool_reserve(graph_reserve_);
  Graph g;
  Tensor logits;
  cuda::begin_capture();
  bool recording = true;
  try {
    logits = inner_->forward_device(padded_plan, cache);
    recording = false;
    g.exec = cuda::end_capture(true);  // ends the capture even when it throws (an invalidated capture)
  } catch (const std::exception& e) {
    if (recording) cuda::end_capture(false);
    failed_.insert(key);
    ++capture_failures_;
    add_time();
    log_warn("CUDA graph for ", key.first, " sequences (context bucket ", key.second,
             ") not captured, its steps run eagerly: ", e.what(), " (graph pool ",
             cuda::graph_pool_bytes() >> 20, " MiB)");
    return nullptr;
  }
  add_time();
  // The output's block goes back to the pool while the graph keeps writing there: a later capture may take
  // it, which is safe because every reader of a step's logits is queued before the next graph's replay
  // (as for two steps of one graph). So the graphs hold one step's memory between them, not one output each.
  static const std::shared_ptr<const void> kPoolMemory = std::make_shared<int>(0);
  g.logits =
      Tensor::borrow(logits.data<uint8_t>(), logits.dtype(), logits.shape(), kPoolMemory, Device::kCuda);
  logits = Tensor();
  g.plan_generation = backend_.step_plan().generation();
  g.invalidations = cuda::graph_invalidations();
  ++captures_;
  return &(graphs_[key] = std::move(g));
}

int64_t CudaGraphModel::profile_graph_memory(KvCache& cache) {
  // A decode step of the largest bucket run eagerly: the peak of its allocations over what was live before
  // is what its capture takes from the graph pool (the same allocations in the same order), plus 1/8 for
  // the pool's ranges not lining up as the allocator's size classes do.
  BatchPlan plan = padding_only(buckets_.back(), cache);
  backend_.stage_plan(plan);
  cuda::synchronize();
  const size_t before = cuda::device_live_bytes();
  cuda::reset_device_peak_bytes();
  {
    Tensor logits = inner_->forward_device(plan, cache);
    cuda::synchronize();
  }
  const size_t peak = cuda::device_peak_bytes();
  for (int32_t s = 0; s < buckets_.back(); ++s) inner_->release_sequence(-1 - s);
  const int64_t working = static_cast<int64_t>(peak > before ? peak - before : 0);
  graph_reserve_ = working + working / 8;
  return graph_reserve_;
}

int64_t CudaGraphModel::precapture_graphs(KvCache& cache, int64_t max_context) {
  if (cache.num_blocks() < 2 || max_context < 1) return 0;
  const int64_t smallest = cuda::attention_max_context_bucket(1);
  int64_t recorded = 0;
  // Largest first: the step plan's buffer and the workspaces grow to their size with the first capture, so
  // none grows later and drops the graphs recorded before it (forward_device records them again then).
  for (auto ctx = static_cast<int32_t>(cuda::attention_max_context_bucket(max_context)); ctx >= smallest;
       ctx /= 2) {
    for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {
      const int32_t bucket = *it;
      const std::pair<int32_t, int32_t> key{bucket, ctx};
      if (graphs_.count(key) || failed_.count(key)) continue;
      // The context bound sizes the attention launches for the bucket, as a step of real sequences whose
      // longest context falls in it would (forward_device): the same graph either way.
      backend_.set_context_bound(ctx);
      try {
        if (capture(padding_only(bucket, cache), cache, key)) ++recorded;
      } catch (const std::exception& e) {  // its eager warm-up step failed: the bucket runs eagerly
        failed_.insert(key);
        ++capture_failures_;
        log_warn("CUDA graph for ", bucket, " sequences (context bucket ", ctx,
                 ") not recorded at startup, its steps run eagerly: ", e.what());
      }
      backend_.set_context_bound(0);
    }
  }
  return recorded;
}

Tensor CudaGraphModel::forward_device(const BatchPlan& plan, KvCache& cache) {
  if (!decode_only(plan) || plan.num_seqs() > buckets_.back() || cache.num_blocks() < 2)
    return inner_->forward_device(plan, cache);
  const int32_t n = plan.num_seqs();
  const int32_t bucket = *std::lower_bound(buckets_.begin(), buckets_.end(), n);
  const int32_t ctx = context_bucket(plan);
  if (failed_.count({bucket, ctx})) return inner_->forward_device(plan, cache);
  const BatchPlan p = padded(plan, bucket, cache);
  backend_.set_context_bound(ctx);
  Graph* g = nullptr;
  auto it = graphs_.find({bucket, ctx});
  if (it != graphs_.end()) {
    g = &it->second;
    if (g->plan_generation != backend_.step_plan().generation() ||
        g->invalidations != cuda::graph_invalidations()) {  // addresses or constants moved: record again
      drop_graphs();
      g = nullptr;
    }
  }
  if (!g) {
    g = capture(p, cache, {bucket, ctx});
    if (!g) {
      backend_.set_context_bound(0);
      return inner_->forward_device(plan, cache);
    }
  }
  backend_.stage_plan(p);
  cuda::launch_graph(g->exec);
  ++replays_;
  backend_.set_context_bound(0);
  return g->logits.rows(0, n);  // [n, vocab]
}

}  // namespace dsinfer
