// Sequence: the scheduler's view of one request: its tokens (prompt, then generated), how many of them have
// KV rows in the cache, its blocks and its place in the queue (priority, then arrival order).
#pragma once
#include <cstdint>
#include <vector>

#include "kv/block_table.h"

namespace dsinfer {

enum class SeqStatus { kWaiting, kRunning };

struct Sequence {
  uint64_t id = 0;
  int32_t priority = 0;         // higher runs first
  uint64_t order = 0;           // arrival rank (FCFS within a priority); kept across preemptions
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t prompt_len = 0;
  int64_t num_computed = 0;   // leading positions whose KV rows are in the cache
  int32_t cached_tokens = 0;  // prompt tokens served from the prefix cache at first admission
  bool admitted = false;      // scheduled at least once
  int32_t preemptions = 0;
  SeqStatus status = SeqStatus::kWaiting;
  uint64_t scheduled_step = 0;  // last step that scheduled it (0: never)
  BlockTable table;
  // Async scheduling: a token was sampled for this sequence on the device and is not in `tokens` yet (it
  // is row `pending_row` of the last sample call). It counts as known: the next step may already compute
  // it (BatchPlan::prev_sample_rows feeds it in), and the engine appends it once it reaches the host.
  bool pending = false;
  int32_t pending_row = -1;
  // Async scheduling: the token in flight certainly ends the request (max_tokens, context): the sequence
  // sits out the next step and its batch slot may go to an admission (its blocks stay until it ends).
  bool ending = false;
  // The prompt is scored (prompt logprobs): every prompt position but the last gets a logits row, so the
  // prompt is computed in full (no prefix-cache hit) in chunks within the step's prompt-row budget. The
  // engine clears it once the scores are delivered (a recompute after preemption then needs none).
  bool prompt_logprobs = false;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  // Tokens including a pending one: position known_tokens() - 1 is the last the sequence can compute.
  int64_t known_tokens() const { return num_tokens() + (pending ? 1 : 0); }
  // Known tokens without KV rows yet (1 while decoding).
  int64_t remaining() const { return known_tokens() - num_computed; }
};

// Queue order: higher priority first, then earlier arrival.
inline bool runs_before(const Sequence* a, const Sequence* b) {
  return a->priority != b->priority ? a->priority > b->priority : a->order < b->order;
}

}  // namespace dsinfer
