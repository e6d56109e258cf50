// Scheduler: step selection (decodes, running prefill chunks, admissions), preemption and plan building.
#include "sched/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace dsinfer {

Scheduler::Scheduler(const SchedulerConfig& config, BlockPool& pool) : config_(config), pool_(pool) {
  DSI_CHECK(config.max_batch_size > 0, "max_batch_size must be positive, got ", config.max_batch_size);
  DSI_CHECK(config.max_num_tokens > 0, "max_num_tokens must be positive, got ", config.max_num_tokens);
  DSI_CHECK(config.context_chunk_size > 0, "context_chunk_size must be positive, got ",
            config.context_chunk_size);
  const int32_t bs = pool.block_size();
  // Chunks are whole blocks where possible so that a chunk never leaves a block half written.
  chunk_size_ =
      config.context_chunk_size >= bs ? config.context_chunk_size / bs * bs : config.context_chunk_size;
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  DSI_CHECK(seq && !seq->tokens.empty(), "Scheduler::add: a sequence needs at least one token");
  DSI_CHECK(!seqs_.count(seq->id), "Scheduler::add: duplicate sequence id ", seq->id);
  seq->status = SeqStatus::kWaiting;
  seq->num_computed = 0;
  Sequence* s = seq.get();
  seqs_.emplace(s->id, std::move(seq));
  waiting_.insert(s);
}

Sequence* Scheduler::find(uint64_t id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

void Scheduler::insert_running(Sequence* s) {
  running_.insert(std::upper_bound(running_.begin(), running_.end(), s, runs_before), s);
  s->status = SeqStatus::kRunning;
}

void Scheduler::erase_running(Sequence* s) {
  auto it = std::find(running_.begin(), running_.end(), s);
  if (it != running_.end()) running_.erase(it);
}

bool Scheduler::remove(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  Sequence* s = it->second.get();
  if (s->status == SeqStatus::kRunning) {
    erase_running(s);
  } else {
    waiting_.erase(s);
  }
  s->table.release(pool_);
  seqs_.erase(it);
  return true;
}

namespace {

// Logits rows that score prompt tokens among positions [start, start + n) of s.
int64_t prompt_rows_of(const Sequence& s, int64_t start, int64_t n) {
  if (!s.prompt_logprobs) return 0;
  return std::max<int64_t>(0, std::min<int64_t>(start + n, s.prompt_len - 1) - start);
}

}  // namespace

int32_t Scheduler::chunk_for(const Sequence& s, int32_t tokens_left, int32_t prompt_rows_left) const {
  const int64_t remaining = s.remaining();
  int64_t n = remaining;
  if (config_.enable_chunked_context) n = std::min<int64_t>(n, chunk_size_);
  n = std::min<int64_t>(n, tokens_left);
  // A scored prompt is split by the step's prompt-row budget (also with chunked context off: its logits
  // rows must stay bounded).
  if (prompt_rows_of(s, s.num_computed, n) > prompt_rows_left) n = std::max(0, prompt_rows_left);
  if (n < remaining) {
    // Without chunked context the whole prompt must fit in one step.
    if (!config_.enable_chunked_context && !s.prompt_logprobs) return 0;
    const int32_t bs = pool_.block_size();
    const int64_t end = (s.num_computed + n) / bs * bs;  // end the chunk on a block boundary when possible
    if (end > s.num_computed) n = end - s.num_computed;
  }
  return static_cast<int32_t>(std::max<int64_t>(0, n));
}

bool Scheduler::is_long(const Sequence& s) const {
  return config_.long_prefill_tokens > 0 && s.prompt_len >= config_.long_prompt_tokens;
}

bool Scheduler::preempt_request(uint64_t id) {
  Sequence* s = find(id);
  if (!s || s->status != SeqStatus::kRunning) return false;
  StepSchedule none;
  Budget unused{0, 0, 0};
  preempt(s, none, unused);
  return true;
}

void Scheduler::schedule_entry(Sequence* s, int32_t n, StepSchedule& out, Budget& budget) {
  out.seqs.push_back({s, s->num_computed, n, s->num_computed + n == s->known_tokens()});
  out.num_tokens += n;
  budget.tokens -= n;
  budget.seqs -= 1;
  budget.prompt_rows -= static_cast<int32_t>(prompt_rows_of(*s, s->num_computed, n));
  s->scheduled_step = out.step;
}

void Scheduler::preempt(Sequence* s, StepSchedule& out, Budget& budget) {
  if (s->scheduled_step == out.step) {  // already in this step: take it out again
    auto it =
        std::find_if(out.seqs.begin(), out.seqs.end(), [&](const ScheduledSeq& e) { return e.seq == s; });
    if (it != out.seqs.end()) {
      out.num_tokens -= it->num_tokens;
      budget.tokens += it->num_tokens;
      budget.seqs += 1;
      budget.prompt_rows += static_cast<int32_t>(prompt_rows_of(*s, it->start, it->num_tokens));
      out.seqs.erase(it);
    }
  }
  erase_running(s);
  s->table.release(pool_);  // full blocks stay in the prefix cache and may be hit on re-admission
  s->num_computed = 0;
  s->status = SeqStatus::kWaiting;
  s->preemptions += 1;
  waiting_.insert(s);
  out.preempted.push_back(s->id);
  ++preemptions_;
}

void Scheduler::fail(Sequence* s, StepSchedule& out) {
  out.failed.push_back(s->id);
  remove(s->id);
}

bool Scheduler::reserve(Sequence* s, int64_t end, StepSchedule& out, Budget& budget) {
  const int32_t bs = pool_.block_size();
  if ((end + bs - 1) / bs > pool_.num_blocks()) {  // more than the whole pool: can never run
    fail(s, out);
    return false;
  }
  while (s->table.blocks_needed(end, bs) > pool_.num_free()) {
    Sequence* victim = running_.back();
    preempt(victim, out, budget);
    if (victim == s) return false;
  }
  DSI_CHECK(s->table.grow(pool_, end), "Scheduler: block allocation failed after reservation");
  return true;
}

StepSchedule Scheduler::schedule() {
  StepSchedule out;
  out.step = ++step_;
  Budget budget{config_.max_num_tokens, config_.max_batch_size, config_.max_prompt_logprob_rows};
  if (batch_limit_ > 0) budget.seqs = std::min(budget.seqs, batch_limit_);
  // Length tiers: what long prefills may still take this step.
  int32_t long_left = config_.long_prefill_tokens > 0 ? config_.long_prefill_tokens : config_.max_num_tokens;

  // 1. Decodes of running sequences, highest rank first, so generation keeps flowing.
  for (size_t i = 0; i < running_.size() && budget.seqs > 0 && budget.tokens > 0;) {
    Sequence* s = running_[i];
    // A pending token that would need more blocks than the pool has waits until the host knows it (the
    // sequence may end on it); then it fails as any other sequence would.
    const int32_t bs = pool_.block_size();
    if (s->remaining() != 1 || (s->pending && s->num_computed / bs + 1 > pool_.num_blocks())) {
      ++i;
      continue;
    }
    if (!reserve(s, s->num_computed + 1, out, budget)) continue;  // s left running_
    schedule_entry(s, 1, out, budget);
    ++i;
  }
  // 2. Next prefill chunks of running sequences (chunked prefill in progress, or recompute).
  for (size_t i = 0; i < running_.size() && budget.seqs > 0 && budget.tokens > 0;) {
    Sequence* s = running_[i];
    if (s->scheduled_step == out.step || s->remaining() <= 1) {
      ++i;
      continue;
    }
    const bool long_seq = is_long(*s);
    const int32_t n =
        chunk_for(*s, long_seq ? std::min(budget.tokens, long_left) : budget.tokens, budget.prompt_rows);
    if (n == 0) {
      ++i;
      continue;
    }
    if (!reserve(s, s->num_computed + n, out, budget)) continue;
    schedule_entry(s, n, out, budget);
    if (long_seq) long_left -= n;
    ++i;
  }
  // 3. Admissions in queue order; none in a step that had to preempt (the blocks are short).
  // With tiers, long sequences whose share is spent are skipped (kept in order) instead of blocking.
  std::vector<Sequence*> skipped;
  // Async scheduling: a running sequence waiting for its sampled token (it may end on it) is not in this
  // step but still holds its place among the running sequences, unless that token certainly ends it.
  int32_t occupied = occupied_slots();
  while (out.preempted.empty() && budget.seqs > 0 && budget.tokens > 0 && occupied < config_.max_batch_size) {
    auto head = waiting_.begin();
    while (head != waiting_.end() && std::find(skipped.begin(), skipped.end(), *head) != skipped.end())
      ++head;
    if (head == waiting_.end()) break;
    Sequence* s = *head;
    const bool long_seq = is_long(*s);
    if (long_seq && long_left <= 0) {
      skipped.push_back(s);
      continue;
    }
    // A preempted sequence is re-admitted only once its pending token reached the host (the engine
    // resolves it before the next step is scheduled, so this wait is never observed).
    if (s->pending) break;
    int32_t hit = 0;
    if (s->table.empty() && !s->prompt_logprobs) {  // a scored prompt needs the logits of every position
      // Keep at least the last token to compute: its logits give the next token.
      hit = s->table.match_prefix(pool_, s->tokens, s->num_tokens() - 1);
      s->num_computed = hit;
    }
    const int32_t n =
        chunk_for(*s, long_seq ? std::min(budget.tokens, long_left) : budget.tokens, budget.prompt_rows);
    const int32_t bs = pool_.block_size();
    if (long_seq && n == 0) {
      s->table.release(pool_);
      s->num_computed = 0;
      skipped.push_back(s);
      continue;
    }
    if (n == 0 || s->table.blocks_needed(s->num_computed + n, bs) > pool_.num_free()) {
      s->table.release(pool_);
      s->num_computed = 0;
      if (running_.empty() && out.seqs.empty()) {
        // Nothing else holds blocks or tokens, so this sequence can never be admitted.
        fail(s, out);
        continue;
      }
      break;  // FCFS: later sequences do not overtake the head of the queue
    }
    DSI_CHECK(s->table.grow(pool_, s->num_computed + n), "Scheduler: block allocation failed after check");
    waiting_.erase(s);
    prefix_hit_tokens_ += hit;
    if (!s->admitted) {
      s->admitted = true;
      s->cached_tokens = std::min(hit, s->prompt_len);
    }
    insert_running(s);
    ++occupied;
    schedule_entry(s, n, out, budget);
    if (long_seq) long_left -= n;
  }
  return out;
}

void Scheduler::complete(const StepSchedule& step) {
  for (const ScheduledSeq& e : step.seqs) {
    Sequence* s = e.seq;
    s->num_computed = e.start + e.num_tokens;
    DSI_CHECK(s->num_computed <= s->num_tokens(), "Scheduler: sequence ", s->id, " completed position ",
              s->num_computed - 1, " before its token reached the host");
    s->table.register_full_blocks(pool_, s->tokens, s->num_computed);
  }
}

BatchPlan Scheduler::build_plan(const StepSchedule& step) const {
  BatchPlan plan;
  const int32_t bs = pool_.block_size();
  plan.block_size = bs;
  plan.token_ids.reserve(step.num_tokens);
  plan.positions.reserve(step.num_tokens);
  plan.slot_mapping.reserve(step.num_tokens);
  plan.cu_seqlens.reserve(step.seqs.size() + 1);
  plan.cu_seqlens.push_back(0);
  plan.block_table_indptr.push_back(0);
  for (const ScheduledSeq& e : step.seqs) {
    const Sequence& s = *e.seq;
    const std::vector<int32_t>& blocks = s.table.blocks();
    const int64_t end = e.start + e.num_tokens;
    for (int64_t p = e.start; p < end; ++p) {
      if (p == s.num_tokens()) {  // the pending token: the backend feeds it from the last sample call
        DSI_CHECK(s.pending && s.pending_row >= 0, "Scheduler: sequence ", s.id, " computes position ", p,
                  " beyond its tokens");
        plan.prev_sample_rows.resize(plan.token_ids.size(), -1);
        plan.prev_sample_rows.push_back(s.pending_row);
        plan.token_ids.push_back(0);
      } else {
        plan.token_ids.push_back(s.tokens[p]);
      }
      plan.positions.push_back(static_cast<int32_t>(p));
      plan.slot_mapping.push_back(static_cast<int64_t>(blocks[p / bs]) * bs + p % bs);
    }
    plan.cu_seqlens.push_back(static_cast<int32_t>(plan.token_ids.size()));
    plan.context_lens.push_back(static_cast<int32_t>(end));
    // The length this prefill pass reaches (all of the sequence's known tokens): chunked prefill then breaks
    // indexer top-k ties exactly as a one-shot prefill would (see BatchPlan::prompt_lens).
    plan.prompt_lens.push_back(static_cast<int32_t>(s.known_tokens()));
    const int64_t nblocks = (end + bs - 1) / bs;
    plan.block_table.insert(plan.block_table.end(), blocks.begin(), blocks.begin() + nblocks);
    plan.block_table_indptr.push_back(static_cast<int32_t>(plan.block_table.size()));
    plan.seq_ids.push_back(static_cast<int64_t>(s.id));
    if (e.sample) plan.logits_rows.push_back(plan.cu_seqlens.back() - 1);
  }
  if (!plan.prev_sample_rows.empty()) plan.prev_sample_rows.resize(plan.token_ids.size(), -1);
  for (const PromptLogprobRow& r : prompt_logprob_rows(step)) plan.logits_rows.push_back(r.row);
  return plan;
}

std::vector<PromptLogprobRow> Scheduler::prompt_logprob_rows(const StepSchedule& step) {
  std::vector<PromptLogprobRow> rows;
  int32_t offset = 0;  // the entry's first token index in the plan
  for (const ScheduledSeq& e : step.seqs) {
    const Sequence& s = *e.seq;
    const int64_t end = e.start + prompt_rows_of(s, e.start, e.num_tokens);
    for (int64_t p = e.start; p < end; ++p) {
      rows.push_back(
          {s.id, static_cast<int32_t>(p), s.tokens[p + 1], offset + static_cast<int32_t>(p - e.start)});
    }
    offset += e.num_tokens;
  }
  return rows;
}

int32_t Scheduler::occupied_slots() const {
  int32_t n = 0;
  for (const Sequence* s : running_) n += s->ending ? 0 : 1;
  return n;
}

int64_t Scheduler::allocated_unused_slots() const {
  int64_t unused = 0;
  for (const Sequence* s : running_) unused += s->table.capacity(pool_.block_size()) - s->num_computed;
  return unused;
}

void Scheduler::check_invariants() const {
  pool_.check_invariants();
  DSI_CHECK(occupied_slots() <= config_.max_batch_size, "Scheduler: ", occupied_slots(),
            " running sequences exceed max_batch_size ", config_.max_batch_size);
  DSI_CHECK(running_.size() + waiting_.size() == seqs_.size(), "Scheduler: queues hold ",
            running_.size() + waiting_.size(), " sequences, the map ", seqs_.size());
  DSI_CHECK(std::is_sorted(running_.begin(), running_.end(), runs_before),
            "Scheduler: running list out of order");
  std::vector<int32_t> refs(pool_.num_blocks(), 0);
  for (const Sequence* s : running_) {
    DSI_CHECK(s->status == SeqStatus::kRunning, "Scheduler: sequence ", s->id,
              " running with waiting status");
    DSI_CHECK(s->num_computed <= s->known_tokens(), "Scheduler: sequence ", s->id,
              " computed beyond its tokens");
    DSI_CHECK(s->table.capacity(pool_.block_size()) >= s->num_computed, "Scheduler: sequence ", s->id,
              " has fewer slots than computed tokens");
    for (int32_t b : s->table.blocks()) {
      DSI_CHECK(pool_.ref_count(b) > 0, "Scheduler: sequence ", s->id, " holds free block ", b);
      ++refs[b];
    }
  }
  for (const Sequence* s : waiting_) {
    DSI_CHECK(s->status == SeqStatus::kWaiting, "Scheduler: sequence ", s->id,
              " waiting with running status");
    DSI_CHECK(s->table.empty() && s->num_computed == 0, "Scheduler: waiting sequence ", s->id,
              " holds blocks");
  }
  for (int32_t b = 0; b < pool_.num_blocks(); ++b) {
    DSI_CHECK(refs[b] == pool_.ref_count(b), "Scheduler: block ", b, " has ", pool_.ref_count(b),
              " references but ", refs[b], " holders");
  }
}

}  // namespace dsinfer
