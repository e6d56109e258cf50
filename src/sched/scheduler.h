// Scheduler: in-flight batching over a BlockPool. Every step mixes the decode tokens of running sequences
// with prefill chunks of running and newly admitted ones, within max_batch_size sequences and max_num_tokens
// tokens. Long prompts are split into chunks that end on block boundaries (chunked prefill). A sequence is
// admitted only when the blocks for its next chunk exist; when blocks run out mid-generation the
// lowest-priority, newest running sequence is preempted (blocks freed, recomputed later).
// Not thread-safe: the engine thread owns it.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "backend/batch_plan.h"
#include "kv/block_pool.h"
#include "sched/sequence.h"

namespace dsinfer {

struct SchedulerConfig {
  int32_t max_batch_size = 64;    // sequences per step
  int32_t max_num_tokens = 2048;  // tokens per step
  bool enable_chunked_context = true;
  int32_t context_chunk_size = 512;  // tokens per prefill chunk
  // Length tiers: prompts of at least long_prompt_tokens tokens are "long"; their prefill chunks take at
  // most long_prefill_tokens of a step's budget (0: no tiers), and a long head of the queue does not hold
  // back shorter requests behind it when that share is spent.
  int32_t long_prompt_tokens = 0;
  int32_t long_prefill_tokens = 0;
  // Logits rows a step may spend on scoring prompts (Sequence::prompt_logprobs), beside its sampled rows:
  // bounds the step's logits ([rows, vocab] float32) whatever the prompts' lengths.
  int32_t max_prompt_logprob_rows = 2048;
};

struct ScheduledSeq {
  Sequence* seq;
  int64_t start;       // first position computed this step (== num_computed before the step)
  int32_t num_tokens;  // positions [start, start + num_tokens) are computed this step
  bool sample;         // the step reaches the last known token: sample the next one from its logits
};

// A logits row that scores a prompt token: the logits at `position` give the logprob of `target`, the
// prompt's token at position + 1. `row` is the row's token index in the step's plan.
struct PromptLogprobRow {
  uint64_t seq_id;
  int32_t position;
  int32_t target;
  int32_t row;
};

struct StepSchedule {
  uint64_t step = 0;
  std::vector<ScheduledSeq> seqs;   // decodes first, then prefill chunks
  std::vector<uint64_t> preempted;  // moved back to waiting this step; their cache rows are gone
  std::vector<uint64_t> failed;     // can never fit in the KV pool: removed; the caller reports them
  int32_t num_tokens = 0;
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockPool& pool);

  // Queues a new sequence (tokens = the prompt, non-empty).
  void add(std::unique_ptr<Sequence> seq);
  Sequence* find(uint64_t id);
  // Removes a sequence in any state and releases its blocks at once; false for unknown ids.
  bool remove(uint64_t id);

  // Picks the next step's work, allocating (and, if needed, preempting for) its blocks.
  StepSchedule schedule();
  // The step's forward pass ran: marks its positions computed and registers full blocks in the prefix cache.
  // Every computed token must be in the sequence's tokens by then (async scheduling appends a pending token
  // first).
  void complete(const StepSchedule& step);
  // Caps the sequences per step below max_batch_size (0: no cap); the circuit breaker's reduce_batch_size
  // fallback and step retries use it.
  void set_batch_limit(int32_t limit) { batch_limit_ = limit; }
  int32_t batch_limit() const { return batch_limit_; }
  // Moves a running sequence back to waiting (blocks released, recomputed later): a failed step's
  // sequences are retried this way. False when `id` is not running.
  bool preempt_request(uint64_t id);
  // The forward pass input for a schedule (before complete()). Its logits rows: the sampled entries' rows
  // in entry order, then prompt_logprob_rows(step) in order.
  BatchPlan build_plan(const StepSchedule& step) const;
  // The rows of `step` that score prompt tokens, by entry, then position.
  static std::vector<PromptLogprobRow> prompt_logprob_rows(const StepSchedule& step);

  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  // Running sequences that hold a batch slot (all but those whose in-flight token ends them).
  int32_t occupied_slots() const;
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  int64_t preemptions() const { return preemptions_; }
  int64_t steps() const { return step_; }
  // Tokens served from the prefix cache over all admissions (re-admissions after preemption included).
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  const SchedulerConfig& config() const { return config_; }
  const BlockPool& pool() const { return pool_; }
  // Token slots in blocks held by running sequences beyond their computed positions.
  int64_t allocated_unused_slots() const;
  // Throws dsinfer::Error when queues, sequence states, block tables and the pool disagree.
  void check_invariants() const;

 private:
  struct Order {
    bool operator()(const Sequence* a, const Sequence* b) const { return runs_before(a, b); }
  };
  struct Budget {
    int32_t tokens;
    int32_t seqs;
    int32_t prompt_rows;  // logits rows left for scoring prompts
  };
  // Tokens of `s` to compute this step within `tokens_left` and the prompt rows left (0: none fit).
  int32_t chunk_for(const Sequence& s, int32_t tokens_left, int32_t prompt_rows_left) const;
  bool is_long(const Sequence& s) const;
  // Grows s's table for `end` positions, preempting lower-ranked running sequences as needed. False when
  // s itself was preempted or failed.
  bool reserve(Sequence* s, int64_t end, StepSchedule& out, Budget& budget);
  void schedule_entry(Sequence* s, int32_t n, StepSchedule& out, Budget& budget);
  void preempt(Sequence* s, StepSchedule& out, Budget& budget);
  void fail(Sequence* s, StepSchedule& out);
  void insert_running(Sequence* s);
  void erase_running(Sequence* s);

  SchedulerConfig config_;
  BlockPool& pool_;
  int32_t chunk_size_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> running_;  // in runs_before order
  std::set<Sequence*, Order> waiting_;
  uint64_t step_ = 0;
  int64_t preemptions_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  int32_t batch_limit_ = 0;
};

}  // namespace dsinfer
