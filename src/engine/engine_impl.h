// EngineImpl: the Engine behind Engine::create. One engine thread owns the scheduler, the block pool, the
// KV cache and the model; submit() and cancel() hand work to it through a mutex-protected inbox, and events
// are delivered from it through each request's callback.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dsinfer/engine.h"
#include "engine/request_state.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer {

// An engine over an already loaded model (tests build one per fixture model; models without a tokenizer
// produce token ids and empty text).
std::unique_ptr<Engine> make_engine(const EngineConfig& config, std::unique_ptr<Backend> backend,
                                    std::unique_ptr<Model> model, std::optional<Tokenizer> tokenizer);

class EngineImpl : public Engine {
 public:
  EngineImpl(const EngineConfig& config, std::unique_ptr<Backend> backend, std::unique_ptr<Model> model,
             std::optional<Tokenizer> tokenizer);
  ~EngineImpl() override;

  uint64_t submit(GenerationRequest request) override;
  void cancel(uint64_t request_id) override;
  EngineStats stats() const override;
  const Tokenizer& tokenizer() const override;
  const ModelConfig& model_config() const override;
  void shutdown(std::chrono::milliseconds timeout) override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Submission {
    uint64_t id;
    GenerationRequest request;
    Clock::time_point arrival;
  };

  void loop();
  void admit(Submission submission);
  void run_step();
  // Ends a request without a token: removes it everywhere and delivers its final event.
  void abort_request(uint64_t id, const std::string& error);
  void publish_stats();

  EngineConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::optional<Tokenizer> tokenizer_;
  std::vector<int32_t> eos_ids_;
  int64_t context_;
  int32_t vocab_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unordered_map<uint64_t, std::unique_ptr<RequestState>> requests_;  // engine thread only
  double peak_utilization_ = 0.0;

  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable wake_;
  std::vector<Submission> inbox_;
  std::vector<uint64_t> cancels_;
  uint64_t next_id_ = 1;
  bool accepting_ = true;
  bool shutting_down_ = false;
  Clock::time_point deadline_{};
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace dsinfer
