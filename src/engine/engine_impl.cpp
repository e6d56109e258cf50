// EngineImpl: request validation, the engine thread's loop (inbox -> schedule -> forward -> sample ->
// events), the synchronous step and the pieces the asynchronous step (engine_async.cpp) shares with it, and
// statistics. Synchronous steps (the CPU backend, or async scheduling off) build the next step's plan after
// the current step's tokens are in (it costs well under a millisecond; see bench/scheduler_bench.cpp).
#include "engine/engine_impl.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/memory_plan.h"
#include "kv/kv_capacity.h"
#include "resilience/step_error.h"
#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/device_query.h"
#include "backend/cuda/runtime.h"
#endif

namespace dsinfer {

std::unique_ptr<Engine> make_engine(const EngineConfig& config, std::shared_ptr<Backend> backend,
                                    std::shared_ptr<Model> model, std::optional<Tokenizer> tokenizer) {
  return std::make_unique<EngineImpl>(config, std::move(backend), std::move(model), std::move(tokenizer));
}

EngineImpl::EngineImpl(const EngineConfig& config, std::shared_ptr<Backend> backend,
                       std::shared_ptr<Model> model, std::optional<Tokenizer> tokenizer)
    : config_(config),
      backend_(std::move(backend)),
      model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      context_(model_->config().max_position_embeddings),
      vocab_(static_cast<int32_t>(model_->config().vocab_size)) {
  DSI_CHECK(config.max_queue_length > 0, "max_queue_length must be positive, got ", config.max_queue_length);
  DSI_CHECK(config.cuda_graph_precapture_context >= 0,
            "cuda_graph_precapture_context must be >= 0 (0: graphs recorded at first use), got ",
            config.cuda_graph_precapture_context);
  eos_ids_ = model_->config().eos_token_ids;
  if (tokenizer_ && tokenizer_->eos_id() &&
      std::find(eos_ids_.begin(), eos_ids_.end(), *tokenizer_->eos_id()) == eos_ids_.end()) {
    eos_ids_.push_back(*tokenizer_->eos_id());
  }
  // The vocabulary trie of JSON-constrained decoding (json_object, tool-call arguments): built here (~85 ms
  // for DeepSeek-V3's vocabulary) rather than at the first such request, which would stall every running one.
  if (tokenizer_) json_vocab_ = std::make_shared<const TokenTrie>(*tokenizer_);
  const std::vector<KvLayerSpec> layers = model_->kv_layout();
  KvCapacityRequest capacity;
  capacity.max_tokens = config.max_tokens_in_paged_kv_cache;
  capacity.cpu_bytes = config.cpu_kv_cache_bytes;
  capacity.gpu_free_mem_fraction = config.kv_cache_free_gpu_mem_fraction;
  capacity.block_size = config.kv_block_size;
  capacity.element_bytes = static_cast<int64_t>(dtype_size(model_->kv_dtype()));
#ifdef DSINFER_HAVE_CUDA
  if (model_->kv_device() == Device::kCuda) {  // weights are loaded: the cache takes a share of what is left
    const std::vector<cuda::DeviceInfo> gpus = cuda::query_devices();
    DSI_CHECK(!gpus.empty(), "the model runs on the GPU, but no CUDA device is visible");
    capacity.on_gpu = true;
    // Activations first (one step of max_num_tokens tokens, peak kept by the caching allocator), then the
    // cache takes its share of what is left, less what the CUDA graphs' pool will hold (a decode step of
    // the largest batch bucket, measured) and 512 MiB for everything else made later (workspaces, mirrors).
    const int64_t graph_bytes = profile_step_memory(layers);
    const int64_t free_bytes = static_cast<int64_t>(cuda::query_devices()[0].free_memory);
    capacity.gpu_free_bytes = free_bytes - graph_bytes - (int64_t{512} << 20);
    DSI_CHECK(capacity.gpu_free_bytes > 0, "the model does not fit: ", free_bytes >> 20,
              " MiB of GPU memory are left after the weights and one step's activations, and the CUDA graphs "
              "of up to ",
              graph_batch_limit(), " sequences need ", graph_bytes >> 20,
              " MiB (lower max_num_tokens, max_batch_size or cuda_graph_max_batch_size)");
    if (graph_bytes > 0) log_info("engine: ", graph_bytes >> 20, " MiB kept for CUDA graphs");
  }
#endif
  const int32_t num_blocks = kv_num_blocks(layers, capacity);
  // Prefix reuse needs every layer's cached rows to be a function of the prefix's tokens alone: true for
  // full-history layers. Models with sliding windows, compressed rows or per-sequence state opt out until
  // they can snapshot that state at block boundaries (docs/architecture.md, "Paged KV cache").
  bool reusable = true;
  for (const KvLayerSpec& l : layers) reusable = reusable && l.kind == KvKind::kFullHistory;
  reusable = reusable && model_->prefix_cache_exact();
  // The model's scratch blocks (CUDA graph padding) sit after the pool's blocks.
  cache_ = std::make_unique<KvCache>(layers, num_blocks + model_->scratch_kv_blocks(), config.kv_block_size,
                                     model_->kv_device(), model_->kv_dtype());
  pool_ =
      std::make_unique<BlockPool>(num_blocks, config.kv_block_size, config.enable_prefix_caching && reusable);
  precapture_graphs();
  SchedulerConfig sc;
  sc.max_batch_size = config.max_batch_size;
  sc.max_num_tokens = config.max_num_tokens;
  sc.enable_chunked_context = config.enable_chunked_context;
  sc.context_chunk_size = config.context_chunk_size;
  DSI_CHECK(config.max_prompt_logprob_rows >= 1, "max_prompt_logprob_rows must be >= 1, got ",
            config.max_prompt_logprob_rows);
  sc.max_prompt_logprob_rows = config.max_prompt_logprob_rows;
  const LengthTiersConfig& tiers = config.resilience.length_tiers;
  if (tiers.enabled) {
    sc.long_prompt_tokens = tiers.long_prompt_tokens;
    sc.long_prefill_tokens = std::max<int32_t>(
        config.kv_block_size, static_cast<int32_t>(tiers.long_prefill_share * config.max_num_tokens));
  }
  scheduler_ = std::make_unique<Scheduler>(sc, *pool_);
  // Async scheduling pays off where the forward pass runs asynchronously (the GPU); the CPU backend
  // computes the step inside forward(), so there it only runs for tests.
  async_ = config.async_scheduling && (model_->kv_device() != Device::kCpu || config.async_scheduling_on_cpu);
  log_info("engine: ", num_blocks, " KV blocks of ", config.kv_block_size, " tokens (", cache_->bytes() >> 20,
           " MiB), prefix caching ", pool_->prefix_caching() ? "on" : "off", ", async scheduling ",
           async_ ? "on" : "off");
  init_resilience();
  publish_stats();
  thread_ = std::thread([this] { loop(); });
}

int64_t EngineImpl::profile_step_memory(const std::vector<KvLayerSpec>& layers) {
#ifdef DSINFER_HAVE_CUDA
  // One prefill of the largest step the scheduler may build, on a cache just big enough for it.
  const int32_t bs = config_.kv_block_size;
  const int32_t T = static_cast<int32_t>(std::min<int64_t>(config_.max_num_tokens, context_ - 1));
  if (T <= 0) return 0;
  const int32_t blocks = (T + bs - 1) / bs;
  BatchPlan plan;
  plan.block_size = bs;
  plan.cu_seqlens = {0, T};
  plan.context_lens = {T};
  plan.block_table_indptr = {0, blocks};
  plan.seq_ids = {-1};
  for (int32_t b = 0; b < blocks; ++b) plan.block_table.push_back(b);
  for (int32_t t = 0; t < T; ++t) {
    plan.token_ids.push_back(t % vocab_);
    plan.positions.push_back(t);
    plan.slot_mapping.push_back(t);
  }
  // The most logits rows a step can have: its sampled rows and its prompt-scoring rows.
  const int32_t rows = config_.max_batch_size + config_.max_prompt_logprob_rows;
  for (int32_t r = std::max(0, T - rows); r < T; ++r) plan.logits_rows.push_back(r);
  int64_t graph_bytes = 0;
  std::string graph_error;
  try {
    KvCache cache(layers, blocks + model_->scratch_kv_blocks(), bs, model_->kv_device(), model_->kv_dtype());
    model_->forward_device(plan, cache);  // the logits stay on the GPU: their peak counts, no copy home
    cuda::synchronize();
    model_->release_sequence(-1);
    try {
      graph_bytes = model_->profile_graph_memory(cache);
    } catch (const std::exception& e) {
      graph_error = e.what();
    }
  } catch (const std::exception& e) {
    fail(step_profile_error(e, T));
  }
  if (!graph_error.empty())
    fail("profiling the CUDA graphs' decode step of ", graph_batch_limit(),
         " sequences failed (lower cuda_graph_max_batch_size or max_batch_size): ", graph_error);
  return graph_bytes;
#else
  (void)layers;
  return 0;
#endif
}

int32_t EngineImpl::graph_batch_limit() const {
  return cuda_graph_batch_limit(config_.cuda_graph_max_batch_size, config_.max_batch_size);
}

void EngineImpl::precapture_graphs() {
  if (config_.cuda_graph_precapture_context == 0) return;
  const auto start = std::chrono::steady_clock::now();
  const int64_t context = std::min<int64_t>(config_.cuda_graph_precapture_context, context_);
  const int64_t recorded = model_->precapture_graphs(*cache_, context);
  if (recorded == 0) return;
  int64_t pool_mib = 0;
#ifdef DSINFER_HAVE_CUDA
  pool_mib = cuda::graph_pool_bytes() >> 20;
#endif
  log_info("engine: ", recorded, " CUDA graphs of decode steps (contexts up to ", context,
           " tokens) recorded in ",
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s, graph pool ",
           pool_mib, " MiB");
}

EngineImpl::~EngineImpl() {
  shutdown(std::chrono::milliseconds(0));
}

void EngineImpl::validate(const GenerationRequest& request) const {
  const std::vector<int32_t>& prompt = request.prompt_ids;
  DSI_CHECK(!prompt.empty(), "the prompt is empty");
  for (int32_t id : prompt) {
    DSI_CHECK(id >= 0 && id < vocab_, "prompt token id ", id, " is outside the vocabulary [0, ", vocab_, ")");
  }
  request.sampling.validate(vocab_);
  DSI_CHECK(!request.sampling.json_object || (tokenizer_ && !eos_ids_.empty()),
            "response_format json_object needs the model's tokenizer and an end-of-sequence token");
  DSI_CHECK(!request.sampling.json_tool_arguments || tokenizer_,
            "JSON tool arguments need the model's tokenizer");
  const int64_t total = static_cast<int64_t>(prompt.size()) + request.sampling.max_tokens;
  DSI_CHECK(total <= context_, "the prompt has ", prompt.size(), " tokens and max_tokens is ",
            request.sampling.max_tokens, ": ", total, " tokens exceed the model's context of ", context_,
            " tokens");
  DSI_CHECK(config_.enable_chunked_context || static_cast<int64_t>(prompt.size()) <= config_.max_num_tokens,
            "the prompt has ", prompt.size(), " tokens, more than max_num_tokens (", config_.max_num_tokens,
            ") with chunked context disabled");
  const int64_t kv_tokens = static_cast<int64_t>(pool_->num_blocks()) * pool_->block_size();
  DSI_CHECK(static_cast<int64_t>(prompt.size()) + 1 <= kv_tokens, "the prompt has ", prompt.size(),
            " tokens but the KV cache holds ", kv_tokens, " tokens");
}

uint64_t EngineImpl::submit(GenerationRequest request) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(request));
  return submit_all(std::move(one)).front();
}

std::vector<uint64_t> EngineImpl::submit_all(std::vector<GenerationRequest> requests) {
  DSI_CHECK(!requests.empty(), "no requests to submit");
  for (size_t i = 0; i < requests.size(); ++i) {
    try {
      validate(requests[i]);
    } catch (const Error& e) {
      if (requests.size() == 1) throw;
      throw Error("request " + std::to_string(i) + " of " + std::to_string(requests.size()) + ": " +
                  e.what());
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  DSI_CHECK(fatal_.empty(), fatal_);
  DSI_CHECK(accepting_, "the engine is shutting down");
  const int64_t queued = static_cast<int64_t>(inbox_.size()) + stats_.waiting;
  DSI_CHECK(queued + static_cast<int64_t>(requests.size()) <= config_.max_queue_length,
            "the request queue is full (", config_.max_queue_length, " waiting requests, ", queued,
            " queued, ", requests.size(), " submitted)");
  std::vector<uint64_t> ids;
  const Clock::time_point now = Clock::now();
  for (GenerationRequest& r : requests) {
    ids.push_back(next_id_++);
    inbox_.push_back({ids.back(), std::move(r), now});
  }
  wake_.notify_one();
  return ids;
}

void EngineImpl::cancel(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  cancels_.push_back(request_id);
  wake_.notify_one();
}

EngineStats EngineImpl::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s = stats_;
  }
  fill_resilience_stats(s);
  return s;
}

const Tokenizer& EngineImpl::tokenizer() const {
  DSI_CHECK(tokenizer_.has_value(), "model ", config_.model_dir, " has no tokenizer");
  return *tokenizer_;
}

const ModelConfig& EngineImpl::model_config() const {
  return model_->config();
}

void EngineImpl::shutdown(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!shutting_down_) {
      accepting_ = false;
      shutting_down_ = true;
      deadline_ = Clock::now() + timeout;
    }
    wake_.notify_one();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  stop_watchdog();
}

void EngineImpl::admit(Submission sub) {
  auto state =
      std::make_unique<RequestState>(sub.id, std::move(sub.request), tokenizer_ ? &*tokenizer_ : nullptr,
                                     eos_ids_, context_, sub.arrival, json_vocab_, vocab_);
  auto seq = std::make_unique<Sequence>();
  seq->id = sub.id;
  seq->priority = state->request().priority;
  seq->order = sub.id;
  seq->tokens = state->request().prompt_ids;
  seq->prompt_len = static_cast<int32_t>(seq->tokens.size());
  seq->prompt_logprobs = state->request().sampling.prompt_logprobs >= 0 && seq->prompt_len > 1;
  scheduler_->add(std::move(seq));
  requests_.emplace(sub.id, std::move(state));
}

void EngineImpl::abort_request(uint64_t id, const std::string& error) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;  // unknown or already finished
  Sequence* seq = scheduler_->find(id);
  const int32_t cached = seq ? seq->cached_tokens : 0;
  scheduler_->remove(id);
  model_->release_sequence(static_cast<int64_t>(id));
  std::unique_ptr<RequestState> state = std::move(it->second);
  requests_.erase(it);
  on_request_end(id, error);
  try {
    state->deliver(state->abort_event(error, cached));
  } catch (const std::exception& e) {
    log_warn("engine: event callback of request ", id, " threw: ", e.what());
  }
}

StepSchedule EngineImpl::schedule_step() {
  StepSchedule step = scheduler_->schedule();
  for (uint64_t id : step.preempted) model_->release_sequence(static_cast<int64_t>(id));
  for (uint64_t id : step.failed) {
    abort_request(id, "the request does not fit in the KV cache (" +
                          std::to_string(static_cast<int64_t>(pool_->num_blocks()) * pool_->block_size()) +
                          " tokens)");
  }
  return step;
}

bool EngineImpl::launch_forward(const StepSchedule& step, Tensor* logits) {
  const Clock::time_point now = Clock::now();
  for (const ScheduledSeq& e : step.seqs) requests_.at(e.seq->id)->on_scheduled(now);
  const Clock::time_point start = Clock::now();
  begin_step_watch(start);
  try {
    if (faults_) faults_->before_step();
    BatchPlan plan = scheduler_->build_plan(step);
    if (plan.feeds_sampled_tokens()) {
      backend_->feed_sampled_tokens(plan);
      for (int32_t r : plan.prev_sample_rows) fed_tokens_ += r >= 0 ? 1 : 0;
    }
    *logits = model_->forward_device(plan, *cache_);
  } catch (const std::exception& e) {
    const bool watchdog_reported = end_step_watch();
    const StepErrorType type = classify_step_error(e);
    if (!(watchdog_reported && type == StepErrorType::kTimeout)) on_step_failure(step, type, e.what());
    return false;
  }
  end_step_watch();  // a slow step is counted as a TIMEOUT; its results are still good
  on_step_success(step, start, Clock::now());
  return true;
}

void EngineImpl::deliver_tokens(const std::vector<uint64_t>& ids, const std::vector<SampledToken>& sampled) {
  for (size_t row = 0; row < ids.size(); ++row) {
    const uint64_t id = ids[row];
    auto it = requests_.find(id);
    Sequence* seq = scheduler_->find(id);
    if (id == 0 || it == requests_.end() || !seq) continue;  // ended after its row was queued: dropped
    RequestState& state = *it->second;
    seq->pending = false;
    seq->pending_row = -1;
    seq->ending = false;
    RequestEvent event;
    try {
      event = state.on_token(sampled.at(row), seq->num_tokens(), seq->cached_tokens);
    } catch (const std::exception& ex) {
      abort_request(id, std::string("sampling failed: ") + ex.what());
      continue;
    }
    std::unique_ptr<RequestState> finished;
    if (event.finished) {
      scheduler_->remove(id);
      model_->release_sequence(static_cast<int64_t>(id));
      finished = std::move(it->second);
      requests_.erase(it);
      on_request_end(id, event.error);
    } else {
      seq->tokens.push_back(state.last_token());
      seq->prompt_logprobs = false;  // delivered with this first event: a recompute scores nothing
    }
    try {
      (finished ? *finished : state).deliver(event);
    } catch (const std::exception& ex) {
      log_warn("engine: event callback of request ", id, " threw: ", ex.what());
    }
  }
}

std::vector<SamplingRow> EngineImpl::prompt_score_rows(const std::vector<PromptLogprobRow>& scored) const {
  std::vector<SamplingRow> rows;
  rows.reserve(scored.size());
  for (const PromptLogprobRow& r : scored) {
    auto it = requests_.find(r.seq_id);
    SamplingRow row;
    row.temperature = 0.0f;
    row.forced_token = r.target;
    // The token's logprob always; the alternatives the request asked for (a request that ended meanwhile:
    // its row is dropped).
    row.logprobs =
        std::max<int32_t>(1, it == requests_.end() ? 0 : it->second->request().sampling.prompt_logprobs);
    rows.push_back(row);
  }
  return rows;
}

void EngineImpl::deliver_prompt_scores(const std::vector<PromptLogprobRow>& scored,
                                       const std::vector<SampledToken>& sampled, size_t first) {
  for (size_t i = 0; i < scored.size(); ++i) {
    const uint64_t id = scored[i].seq_id;
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;  // ended meanwhile (or failed on an earlier row): dropped
    try {
      it->second->on_prompt_logprob(scored[i].position, sampled.at(first + i));
    } catch (const std::exception& ex) {
      abort_request(id, std::string("scoring the prompt failed: ") + ex.what());
    }
  }
}

void EngineImpl::abort_sampled(const std::vector<uint64_t>& ids, const std::vector<PromptLogprobRow>& scored,
                               const std::exception& error) {
  const std::string why = std::string("sampling failed: ") + error.what();
  for (uint64_t id : ids) {
    if (id) abort_request(id, why);
  }
  for (const PromptLogprobRow& r : scored) abort_request(r.seq_id, why);  // ended ones are ignored
}

void EngineImpl::run_step() {
  if (async_) {
    run_step_async();
    return;
  }
  StepSchedule step = schedule_step();
  if (step.empty()) return;
  const std::vector<PromptLogprobRow> scored = Scheduler::prompt_logprob_rows(step);
  Tensor logits;  // [sampled sequences + scored prompt positions, vocab], host or device
  if (!launch_forward(step, &logits)) return;
  scheduler_->complete(step);
  // One sampling call for the whole batch: on the GPU only the chosen tokens (and requested logprobs) come
  // back to the host. Rows borrow each request's state; nothing touches it until the results are in.
  std::vector<SamplingRow> rows;
  std::vector<uint64_t> ids;
  for (const ScheduledSeq& e : step.seqs) {
    if (!e.sample) continue;
    rows.push_back(requests_.at(e.seq->id)->sampling_row());
    ids.push_back(e.seq->id);
  }
  const std::vector<SamplingRow> score_rows = prompt_score_rows(scored);
  rows.insert(rows.end(), score_rows.begin(), score_rows.end());
  std::vector<SampledToken> sampled;
  try {
    sampled = backend_->sample(logits, rows);
  } catch (const std::exception& ex) {  // the whole call failed (not one row): every sampled request ends
    abort_sampled(ids, scored, ex);
    return;
  }
  deliver_prompt_scores(scored, sampled, ids.size());  // before the first token's event, which carries them
  sampled.resize(std::min(sampled.size(), ids.size()));
  deliver_tokens(ids, sampled);
}

void EngineImpl::publish_stats() {
  EngineStats s;
  s.running = scheduler_->num_running();
  s.waiting = scheduler_->num_waiting();
  s.kv_blocks_total = pool_->num_blocks();
  s.kv_blocks_used = pool_->num_used();
  s.kv_blocks_cached = pool_->num_cached();
  s.kv_utilization = static_cast<double>(s.kv_blocks_used) / static_cast<double>(s.kv_blocks_total);
  const int64_t allocated = s.kv_blocks_used * pool_->block_size();
  s.fragmentation = allocated > 0 ? static_cast<double>(scheduler_->allocated_unused_slots()) /
                                        static_cast<double>(allocated)
                                  : 0.0;
  s.preemptions = scheduler_->preemptions();
  s.steps = scheduler_->steps();
  s.cuda_graph_replays = model_->graph_replays();
  s.cuda_graph_capture_failures = model_->graph_capture_failures();
  s.cuda_graph_captures = model_->graph_captures();
  s.cuda_graph_capture_seconds = model_->graph_capture_seconds();
  s.fed_tokens = fed_tokens_;
  s.dropped_entries = dropped_entries_;
  s.prefix_cache_hit_tokens = scheduler_->prefix_hit_tokens();
  peak_utilization_ = std::max(peak_utilization_, s.kv_utilization);
  s.kv_utilization_peak = peak_utilization_;
  s.kv_block_size = pool_->block_size();
  std::lock_guard<std::mutex> lock(mutex_);
  s.waiting += static_cast<int32_t>(inbox_.size());
  stats_ = s;
}

void EngineImpl::loop() {
  while (true) {
    std::vector<Submission> inbox;
    std::vector<uint64_t> cancels;
    bool shutting_down = false;
    Clock::time_point deadline;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto ready = [&] {
        return !inbox_.empty() || !cancels_.empty() || shutting_down_ || scheduler_->has_work() || inflight_;
      };
      if (ticking()) {
        wake_.wait_for(lock, std::chrono::milliseconds(100), ready);
      } else {
        wake_.wait(lock, ready);
      }
      inbox.swap(inbox_);
      cancels.swap(cancels_);
      shutting_down = shutting_down_;
      deadline = deadline_;
    }
    for (Submission& s : inbox) admit(std::move(s));
    for (uint64_t id : cancels) abort_request(id, "cancelled");
    resilience_tick();
    if (shutting_down && (!scheduler_->has_work() || Clock::now() >= deadline)) {
      std::vector<uint64_t> ids;
      for (const auto& [id, state] : requests_) ids.push_back(id);
      std::sort(ids.begin(), ids.end());
      for (uint64_t id : ids) abort_request(id, "the engine shut down");
      finish_inflight();  // its rows belong to ended requests: dropped
      publish_stats();
      return;
    }
    if (scheduler_->has_work() || inflight_) {
      const Clock::time_point busy_start = Clock::now();
      try {
        run_step();
        if (busy_) busy_->add(busy_start, Clock::now());
      } catch (const std::exception& e) {
        log_error("engine: step failed: ", e.what());
        std::vector<uint64_t> ids;
        for (const auto& [id, state] : requests_) ids.push_back(id);
        for (uint64_t id : ids) abort_request(id, std::string("engine step failed: ") + e.what());
        finish_inflight();
      }
    }
    publish_stats();
  }
}

}  // namespace dsinfer
