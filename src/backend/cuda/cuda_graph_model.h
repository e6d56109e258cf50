// CudaGraphModel: wraps a model running on the CUDA backend and runs its decode-only steps (every sequence
// adds one token) as replays of CUDA graphs, one per (batch-size bucket, context bucket of the attention
// kernels). A step is padded to its bucket with dummy sequences that write to a scratch KV block; the plan's
// arrays live in the backend's step-plan buffer (fixed addresses), so a replay only uploads the new plan and
// launches. Prefill and mixed steps, and steps beyond the largest bucket, run eagerly.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "backend/cuda/cuda_backend.h"
#include "model/model.h"

namespace dsinfer {

struct CudaGraphOptions {
  int32_t max_batch = 256;  // largest bucket (the engine's max_batch_size)
};

// The batch-size buckets for a largest batch of `max_batch` (ascending; the last one >= max_batch): 1, 2, 4,
// then every 8 up to 64, then every 32. Throws when a bucket would round a batch of T past next_pow2(T)
// (launch choices assume it: batch_bucket.h).
std::vector<int32_t> graph_batch_buckets(int32_t max_batch);

class CudaGraphModel : public Model {
 public:
  CudaGraphModel(std::unique_ptr<Model> inner, CudaBackend& backend, CudaGraphOptions options);
  ~CudaGraphModel() override;

  const ModelConfig& config() const override { return inner_->config(); }
  std::vector<KvLayerSpec> kv_layout() const override { return inner_->kv_layout(); }
  Device kv_device() const override { return inner_->kv_device(); }
  DType kv_dtype() const override { return inner_->kv_dtype(); }
  void release_sequence(int64_t seq_id) override { inner_->release_sequence(seq_id); }
  bool prefix_cache_exact() const override { return inner_->prefix_cache_exact(); }
  int32_t scratch_kv_blocks() const override { return 1; }

  Tensor forward(const BatchPlan& plan, KvCache& cache) override;
  Tensor forward_device(const BatchPlan& plan, KvCache& cache) override;

  // Batch-size buckets (ascending) and the statistics of graph use.
  const std::vector<int32_t>& batch_buckets() const { return buckets_; }
  int64_t graph_replays() const override { return replays_; }
  int64_t graph_captures() const override { return captures_; }
  double graph_capture_seconds() const override { return capture_seconds_; }
  int64_t graph_capture_failures() const override { return capture_failures_; }
  // Measures what the largest bucket's capture will take from the graph pool (a decode step of that many
  // padded sequences on `cache`'s scratch block, run eagerly) and reserves that much in one range before the
  // first capture. The engine calls it before sizing the KV cache, which leaves this much free.
  int64_t profile_graph_memory(KvCache& cache) override;
  // Captures the graph of every (batch bucket, context bucket) pair not yet recorded, for the context buckets
  // from the smallest up to the one of `max_context` tokens; every sequence of these steps is padding.
  int64_t precapture_graphs(KvCache& cache, int64_t max_context) override;

 private:
  struct Graph {
    void* exec = nullptr;  // cuda::GraphHandle
    Tensor logits;         // [bucket, vocab] output: a view into the graph pool, shared with later captures
    uint64_t plan_generation = 0;
    uint64_t invalidations = 0;
  };
  // The padded plan of a decode step for `bucket` sequences (padding writes to the scratch block).
  BatchPlan padded(const BatchPlan& plan, int32_t bucket, const KvCache& cache) const;
  // A decode step of `bucket` padding sequences and no real one.
  BatchPlan padding_only(int32_t bucket, const KvCache& cache) const;
  Graph* capture(const BatchPlan& padded_plan, KvCache& cache, std::pair<int32_t, int32_t> key);
  void drop_graphs();

  std::unique_ptr<Model> inner_;
  CudaBackend& backend_;
  CudaGraphOptions options_;
  std::vector<int32_t> buckets_;
  std::map<std::pair<int32_t, int32_t>, Graph> graphs_;  // (batch bucket, context bucket)
  std::set<std::pair<int32_t, int32_t>> failed_;         // buckets whose capture failed: run eagerly
  int64_t capture_failures_ = 0;
  double capture_seconds_ = 0.0;
  int64_t graph_reserve_ = 0;  // bytes the first capture reserves in the pool (profile_graph_memory)
  int64_t replays_ = 0;
  int64_t captures_ = 0;
};

}  // namespace dsinfer
