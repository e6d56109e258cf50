// TEMPORARY stand-in for Engine::create until the batched engine (branch `engine`) is merged: runs requests
// one at a time through generate() on a private engine thread. Delete this file when merging the real
// engine (its src/engine/engine_factory.cpp defines Engine::create). No batching, no logprobs, no prefix
// cache; cancellation takes effect at the next text delta.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "backend/backend_factory.h"
#include "core/error.h"
#include "dsinfer/engine.h"
#include "engine/generator.h"
#include "model/model.h"

namespace dsinfer {

namespace {

struct Cancelled {};

class SequentialEngine : public Engine {
 public:
  explicit SequentialEngine(const EngineConfig& config)
      : config_(config),
        backend_(make_backend(config.device)),
        tokenizer_(Tokenizer::load(config.model_dir)),
        model_(load_model(config.model_dir, *backend_)) {
    thread_ = std::thread([this]() { loop(); });
  }
  ~SequentialEngine() override { shutdown(std::chrono::milliseconds(0)); }

  uint64_t submit(GenerationRequest request) override {
    request.sampling.validate(static_cast<int32_t>(model_->config().vocab_size));
    const int64_t max_len = model_->config().max_position_embeddings;
    DSI_CHECK(max_len <= 0 ||
                  static_cast<int64_t>(request.prompt_ids.size()) + request.sampling.max_tokens <= max_len,
              "prompt + max_tokens exceed the context of ", max_len, " tokens");
    std::lock_guard<std::mutex> lock(mu_);
    DSI_CHECK(!stopping_, "the engine is shutting down");
    DSI_CHECK(static_cast<int32_t>(queue_.size()) < config_.max_queue_length, "the request queue is full (",
              config_.max_queue_length, ")");
    const uint64_t id = next_id_++;
    queue_.push_back({id, std::move(request), std::chrono::steady_clock::now()});
    cv_.notify_one();
    return id;
  }

  void cancel(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_id_ == id) {
      cancel_running_ = true;
      return;
    }
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->id == id) {
        Item item = std::move(*it);
        queue_.erase(it);
        cancelled_.push_back(std::move(item));
        cv_.notify_one();
        return;
      }
    }
  }

  EngineStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    EngineStats s;
    s.running = running_id_ ? 1 : 0;
    s.waiting = static_cast<int32_t>(queue_.size());
    return s;
  }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  const ModelConfig& model_config() const override { return model_->config(); }

  void shutdown(std::chrono::milliseconds timeout) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ && !thread_.joinable()) return;
      stopping_ = true;
      for (auto& item : queue_) cancelled_.push_back(std::move(item));
      queue_.clear();
      if (running_id_ && timeout.count() == 0) cancel_running_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Item {
    uint64_t id;
    GenerationRequest request;
    std::chrono::steady_clock::time_point arrival;
  };

  static void finish_cancelled(Item& item) {
    RequestEvent ev;
    ev.request_id = item.id;
    ev.finished = true;
    ev.error = "cancelled";
    ev.arrival = item.arrival;
    ev.usage.prompt_tokens = static_cast<int32_t>(item.request.prompt_ids.size());
    if (item.request.on_event) item.request.on_event(ev);
  }

  void loop() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&]() { return stopping_ || !queue_.empty() || !cancelled_.empty(); });
        while (!cancelled_.empty()) {
          Item c = std::move(cancelled_.front());
          cancelled_.pop_front();
          lock.unlock();
          finish_cancelled(c);
          lock.lock();
        }
        if (queue_.empty()) {
          if (stopping_) return;
          continue;
        }
        item = std::move(queue_.front());
        queue_.pop_front();
        running_id_ = item.id;
        cancel_running_ = false;
      }
      run(item);
      std::lock_guard<std::mutex> lock(mu_);
      running_id_ = 0;
    }
  }

  void run(Item& item) {
    const auto scheduled = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point first_token{};
    try {
      GenerationResult r = generate(*model_, tokenizer_, item.request.prompt_ids, item.request.sampling,
                                    [&](std::string_view text) {
                                      if (cancel_running_) throw Cancelled{};
                                      if (first_token == std::chrono::steady_clock::time_point{}) {
                                        first_token = std::chrono::steady_clock::now();
                                      }
                                      RequestEvent ev;
                                      ev.request_id = item.id;
                                      ev.text = std::string(text);
                                      item.request.on_event(ev);
                                    });
      RequestEvent ev;
      ev.request_id = item.id;
      ev.finished = true;
      ev.finish_reason = r.finish_reason;
      ev.token_ids = {};
      ev.usage.prompt_tokens = r.prompt_tokens;
      ev.usage.completion_tokens = r.completion_tokens;
      ev.arrival = item.arrival;
      ev.first_scheduled = scheduled;
      ev.first_token = first_token;
      item.request.on_event(ev);
    } catch (const Cancelled&) {
      finish_cancelled(item);
    } catch (const std::exception& e) {
      RequestEvent ev;
      ev.request_id = item.id;
      ev.finished = true;
      ev.error = e.what();
      item.request.on_event(ev);
    }
  }

  EngineConfig config_;
  std::unique_ptr<Backend> backend_;
  Tokenizer tokenizer_;
  std::unique_ptr<Model> model_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  std::deque<Item> cancelled_;
  uint64_t next_id_ = 1;
  uint64_t running_id_ = 0;
  std::atomic<bool> cancel_running_{false};
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Engine> Engine::create(const EngineConfig& config) {
  return std::make_unique<SequentialEngine>(config);
}

}  // namespace dsinfer
