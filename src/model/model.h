// Model: a loaded checkpoint that runs forward steps through a Backend over a paged KV cache.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/index_selection_hook.h"
#include "model/model_config.h"
#include "model/moe_routing_hook.h"

namespace dsinfer {

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // What every layer caches per token (the KV cache is allocated from this).
  virtual std::vector<KvLayerSpec> kv_layout() const = 0;
  // Where the KV cache for forward() must live (the backend's device).
  virtual Device kv_device() const { return Device::kCpu; }
  // The element type of that cache (Backend::kv_dtype of the model's backend).
  virtual DType kv_dtype() const { return DType::F32; }
  // Runs plan's tokens (writing their cache rows) and returns host float32 logits
  // [plan.logits_rows.size(), vocab].
  virtual Tensor forward(const BatchPlan& plan, KvCache& cache) = 0;
  // forward() with the float32 logits [plan.logits_rows.size(), vocab] left where the backend keeps them
  // (device memory on the GPU backend, valid until the next forward call), for Backend::sample. Default:
  // forward() (host).
  virtual Tensor forward_device(const BatchPlan& plan, KvCache& cache) { return forward(plan, cache); }
  // KV blocks the model needs beyond the ones the block pool hands out: the engine allocates the cache with
  // this many extra blocks at the end (CudaGraphModel writes padding rows there).
  virtual int32_t scratch_kv_blocks() const { return 0; }
  // Steps run as CUDA graph replays so far (CudaGraphModel).
  virtual int64_t graph_replays() const { return 0; }
  // Decode steps whose CUDA graph could not be captured (they run eagerly; CudaGraphModel).
  virtual int64_t graph_capture_failures() const { return 0; }
  // CUDA graphs captured so far and the host seconds spent capturing them (launching an eager warm-up step,
  // the capture and the instantiation).
  virtual int64_t graph_captures() const { return 0; }
  virtual double graph_capture_seconds() const { return 0.0; }
  // Device bytes the model's CUDA graphs will hold at most, measured on `cache` (scratch blocks included)
  // before the engine sizes the KV cache; 0 for models without graphs.
  virtual int64_t profile_graph_memory(KvCache& cache) { return 0; }
  // Records now (at startup) the CUDA graphs of decode steps of every batch bucket for every context bucket
  // up to the one that holds `max_context` tokens, so that no request's step pays their capture later;
  // returns how many it recorded (0 for models without graphs).
  virtual int64_t precapture_graphs(KvCache& cache, int64_t max_context) { return 0; }
  // Drops per-sequence state kept outside the paged cache (none for most models).
  virtual void release_sequence(int64_t seq_id) {}
  // Whether a prefix's cached rows are the same whatever prompt they were computed in, so that the prefix
  // cache may share them. False for models whose top-k index selection breaks exact ties by the length of
  // the whole prompt (BatchPlan::prompt_lens, as transformers' one-shot prefill does): DeepSeek-V3.2 and V4.
  virtual bool prefix_cache_exact() const { return true; }
  // Whether a decode step may be captured once and replayed as a CUDA graph: its launches depend on the
  // plan's device arrays alone. False for a model whose ops read per-step host lists.
  virtual bool graph_capturable() const { return true; }
  // Routes every MoE layer's routing through `hook` (null: none). False for models without MoE routing.
  virtual bool set_moe_routing_hook(MoeRoutingHook* hook) { return false; }
  // Routes every indexed layer's row selection through `hook` (null: none). False for models without an
  // indexer (sparse attention).
  virtual bool set_index_selection_hook(IndexSelectionHook* hook) { return false; }
};

struct LoadOptions {
  bool progress = true;        // progress bar on a terminal
  bool dummy_weights = false;  // random weights from config.json alone (benchmarks)
  uint64_t dummy_seed = 0;
};

// Reads DIR/config.json and DIR's safetensors and builds the model for `backend`.
std::unique_ptr<Model> load_model(const std::string& dir, Backend& backend, const LoadOptions& options = {});

}  // namespace dsinfer
