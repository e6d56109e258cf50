// Scheduler tests: budgets, chunk alignment, admission and preemption order, and property tests that drive
// the scheduler with random arrivals, cancellations and fake sampling (fixed seeds), synchronously and with
// the async engine's one-step lookahead (pending tokens), checking its invariants after every step and that
// every request finishes or is cancelled.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "core/error.h"

namespace dsinfer {
namespace {

std::unique_ptr<Sequence> make_seq(uint64_t id, int32_t prompt_len, int32_t priority = 0,
                                   int32_t first_token = 0) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->order = id;
  s->priority = priority;
  for (int32_t i = 0; i < prompt_len; ++i) s->tokens.push_back(first_token + i);
  s->prompt_len = prompt_len;
  return s;
}

// Runs one step without a model: marks it computed and appends a token to every sampled sequence.
StepSchedule step_once(Scheduler& sched) {
  StepSchedule step = sched.schedule();
  BatchPlan plan = sched.build_plan(step);
  plan.validate(sched.pool().num_blocks());
  sched.complete(step);
  for (const ScheduledSeq& e : step.seqs) {
    if (e.sample) e.seq->tokens.push_back(7);
  }
  return step;
}

TEST(Scheduler, ChunksEndOnBlockBoundariesAndRespectBudgets) {
  BlockPool pool(64, 4);
  SchedulerConfig c;
  c.max_num_tokens = 10;
  c.context_chunk_size = 7;  // rounded down to 4 (one block)
  Scheduler sched(c, pool);
  sched.add(make_seq(1, 13));
  std::vector<int32_t> chunks;
  while (true) {
    StepSchedule step = step_once(sched);
    ASSERT_EQ(step.seqs.size(), 1u);
    chunks.push_back(step.seqs[0].num_tokens);
    if (step.seqs[0].sample) break;
  }
  EXPECT_EQ(chunks, (std::vector<int32_t>{4, 4, 4, 1}));
  sched.check_invariants();
  sched.remove(1);
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(Scheduler, DecodesFirstThenPrefillWithinTokenBudget) {
  BlockPool pool(64, 4);
  SchedulerConfig c;
  c.max_num_tokens = 6;
  c.context_chunk_size = 64;
  Scheduler sched(c, pool);
  sched.add(make_seq(1, 3));
  step_once(sched);                              // prefill of 1 (3 tokens) + token sampled
  EXPECT_EQ(sched.allocated_unused_slots(), 1);  // one block of 4 slots, 3 computed
  sched.add(make_seq(2, 20));
  StepSchedule step = step_once(sched);
  ASSERT_EQ(step.seqs.size(), 2u);
  EXPECT_EQ(step.seqs[0].seq->id, 1u);
  EXPECT_EQ(step.seqs[0].num_tokens, 1);
  EXPECT_EQ(step.seqs[1].seq->id, 2u);
  EXPECT_EQ(step.seqs[1].num_tokens, 4);  // 5 tokens left, aligned down to a block
  EXPECT_LE(step.num_tokens, 6);
  sched.check_invariants();
}

TEST(Scheduler, HigherPriorityAdmittedFirstAndLowestPreemptedFirst) {
  BlockPool pool(6, 4);  // 24 token slots
  SchedulerConfig c;
  c.max_num_tokens = 64;
  Scheduler sched(c, pool);
  sched.add(make_seq(1, 8, /*priority=*/0));
  sched.add(make_seq(2, 8, /*priority=*/5));
  StepSchedule first = step_once(sched);
  ASSERT_EQ(first.seqs.size(), 2u);
  EXPECT_EQ(first.seqs[0].seq->id, 2u);  // higher priority first
  // Both decode until the pool runs out: the low-priority request is preempted, never the other.
  for (int i = 0; i < 6; ++i) {
    StepSchedule s = step_once(sched);
    for (uint64_t p : s.preempted) EXPECT_EQ(p, 1u);
    sched.check_invariants();
  }
  EXPECT_GT(sched.preemptions(), 0);
  Sequence* high = sched.find(2);
  ASSERT_NE(high, nullptr);
  EXPECT_EQ(high->status, SeqStatus::kRunning);
  EXPECT_EQ(high->preemptions, 0);
}

TEST(Scheduler, FailsWhatCanNeverFit) {
  BlockPool pool(2, 4);
  Scheduler sched(SchedulerConfig{}, pool);
  sched.add(make_seq(1, 7));
  StepSchedule s = step_once(sched);  // 7 tokens fit in 2 blocks
  ASSERT_EQ(s.seqs.size(), 1u);
  s = step_once(sched);  // decode writes position 7: still fits
  ASSERT_TRUE(s.failed.empty());
  s = step_once(sched);  // position 8 needs a third block
  EXPECT_EQ(s.failed, (std::vector<uint64_t>{1}));
  EXPECT_FALSE(sched.has_work());
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(Scheduler, PrefixHitCountsCachedTokens) {
  BlockPool pool(16, 4);
  Scheduler sched(SchedulerConfig{}, pool);
  sched.add(make_seq(1, 10));
  step_once(sched);
  sched.remove(1);
  sched.add(make_seq(2, 10));
  StepSchedule s = sched.schedule();
  ASSERT_EQ(s.seqs.size(), 1u);
  EXPECT_EQ(s.seqs[0].start, 8);
  EXPECT_EQ(sched.find(2)->cached_tokens, 8);
  EXPECT_EQ(sched.prefix_hit_tokens(), 8);
}

std::unique_ptr<Sequence> scored_seq(uint64_t id, int32_t prompt_len, int32_t first_token = 0) {
  auto s = make_seq(id, prompt_len, 0, first_token);
  s->prompt_logprobs = true;
  return s;
}

// Runs `sched` until `seqs` sequences sampled their first token; checks every step's prompt-scoring rows
// against its plan and the row budget, and returns each sequence's scored positions in order.
std::map<uint64_t, std::vector<int32_t>> scored_positions(Scheduler& sched, size_t seqs, int32_t budget,
                                                          int32_t* steps) {
  std::map<uint64_t, std::vector<int32_t>> seen;
  std::set<uint64_t> sampled;
  *steps = 0;
  while (sched.has_work() && sampled.size() < seqs && *steps < 100) {
    StepSchedule step = sched.schedule();
    ++*steps;
    const BatchPlan plan = sched.build_plan(step);
    plan.validate(sched.pool().num_blocks());
    const std::vector<PromptLogprobRow> rows = Scheduler::prompt_logprob_rows(step);
    EXPECT_LE(static_cast<int32_t>(rows.size()), budget);
    size_t num_sampled = 0;
    for (const ScheduledSeq& e : step.seqs) num_sampled += e.sample ? 1 : 0;
    // The plan's logits rows: the sampled entries' rows, then the scoring rows in order.
    EXPECT_EQ(plan.logits_rows.size(), num_sampled + rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const PromptLogprobRow& r = rows[i];
      const Sequence& s = *sched.find(r.seq_id);
      EXPECT_EQ(plan.logits_rows[num_sampled + i], r.row);
      EXPECT_EQ(plan.positions[r.row], r.position);  // the row computes that position ...
      EXPECT_EQ(plan.token_ids[r.row], s.tokens[r.position]);
      EXPECT_EQ(r.target, s.tokens[r.position + 1]);  // ... and scores the prompt token after it
      EXPECT_LT(r.position, s.prompt_len - 1);
      seen[r.seq_id].push_back(r.position);
    }
    sched.complete(step);
    for (const ScheduledSeq& e : step.seqs) {
      if (!e.sample) continue;
      sampled.insert(e.seq->id);
      e.seq->tokens.push_back(7);
      e.seq->prompt_logprobs = false;  // as the engine does once the first token is delivered
    }
    sched.check_invariants();
  }
  return seen;
}

std::vector<int32_t> iota_to(int32_t n) {
  std::vector<int32_t> v(n);
  for (int32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(Scheduler, ScoredPromptsGetARowForEveryPositionWithinTheRowBudget) {
  BlockPool pool(64, 4);
  SchedulerConfig c;
  c.max_num_tokens = 64;
  c.context_chunk_size = 64;
  c.max_prompt_logprob_rows = 5;
  Scheduler sched(c, pool);
  sched.add(scored_seq(1, 13));
  sched.add(scored_seq(2, 9, 100));
  int32_t steps = 0;
  const auto seen = scored_positions(sched, 2, 5, &steps);
  EXPECT_EQ(seen.at(1), iota_to(12));  // positions 0..11 score prompt tokens 1..12, each once, in order
  EXPECT_EQ(seen.at(2), iota_to(8));
  EXPECT_GE(steps, 4);  // 20 rows at 5 a step
  // Once scored, a sequence decodes with no more scoring rows.
  const StepSchedule next = sched.schedule();
  EXPECT_TRUE(Scheduler::prompt_logprob_rows(next).empty());
}

TEST(Scheduler, ScoredPromptIsSplitByTheRowBudgetAlsoWithoutChunkedContext) {
  BlockPool pool(64, 4);
  SchedulerConfig c;
  c.enable_chunked_context = false;
  c.max_prompt_logprob_rows = 4;
  Scheduler sched(c, pool);
  sched.add(scored_seq(1, 11));
  sched.add(make_seq(2, 11));  // unscored: still one step for its whole prompt
  int32_t steps = 0;
  const auto seen = scored_positions(sched, 2, 4, &steps);
  EXPECT_EQ(seen.at(1), iota_to(10));
  EXPECT_EQ(seen.count(2), 0u);
}

TEST(Scheduler, ScoredPromptTakesNoPrefixHit) {
  BlockPool pool(16, 4);
  Scheduler sched(SchedulerConfig{}, pool);
  sched.add(make_seq(1, 10));
  step_once(sched);
  sched.remove(1);  // its two full blocks stay in the prefix cache
  sched.add(scored_seq(2, 10));
  StepSchedule s = sched.schedule();
  ASSERT_EQ(s.seqs.size(), 1u);
  EXPECT_EQ(s.seqs[0].start, 0);  // every position computed: each one's logits score a token
  EXPECT_EQ(s.seqs[0].num_tokens, 10);
  EXPECT_EQ(Scheduler::prompt_logprob_rows(s).size(), 9u);
  EXPECT_EQ(sched.prefix_hit_tokens(), 0);
  sched.complete(s);
  sched.remove(2);
  sched.add(make_seq(3, 10));  // unscored: hits as before
  s = sched.schedule();
  ASSERT_EQ(s.seqs.size(), 1u);
  EXPECT_EQ(s.seqs[0].start, 8);
}

struct PropertyParam {
  uint32_t seed;
  int32_t num_blocks;
  int32_t block_size;
  int32_t max_batch;
  int32_t max_tokens;
  int32_t chunk;
  bool chunked;
  bool prefix;
};

class SchedulerPropertyTest : public ::testing::TestWithParam<PropertyParam> {};

TEST_P(SchedulerPropertyTest, InvariantsHoldUnderRandomTraffic) {
  const PropertyParam p = GetParam();
  std::mt19937 rng(p.seed);
  BlockPool pool(p.num_blocks, p.block_size, p.prefix);
  SchedulerConfig c;
  c.max_batch_size = p.max_batch;
  c.max_num_tokens = p.max_tokens;
  c.context_chunk_size = p.chunk;
  c.enable_chunked_context = p.chunked;
  c.max_prompt_logprob_rows = 1 + static_cast<int32_t>(p.seed % 16);  // some prompts are scored
  Scheduler sched(c, pool);
  const int64_t capacity = static_cast<int64_t>(p.num_blocks) * p.block_size;
  std::map<uint64_t, int32_t> target;  // id -> total tokens at which it finishes
  std::set<uint64_t> live, finished, cancelled, failed;
  uint64_t next_id = 1;
  const int kArrivals = 120;
  int steps = 0;
  while ((next_id <= kArrivals || sched.has_work()) && steps < 20000) {
    ++steps;
    // Random arrivals (bursty) with shared prefixes and random priorities.
    if (next_id <= kArrivals && rng() % 3 == 0) {
      const int burst = 1 + static_cast<int>(rng() % 4);
      for (int b = 0; b < burst && next_id <= kArrivals; ++b) {
        int32_t len = 1 + static_cast<int32_t>(rng() % 60);
        if (!p.chunked) len = std::min(len, p.max_tokens);
        auto s =
            make_seq(next_id, len, static_cast<int32_t>(rng() % 3), static_cast<int32_t>(rng() % 2) * 1000);
        s->prompt_logprobs = rng() % 4 == 0;
        target[next_id] = len + 1 + static_cast<int32_t>(rng() % 30);
        live.insert(next_id);
        sched.add(std::move(s));
        ++next_id;
      }
    }
    // Random cancellations in any state.
    if (!live.empty() && rng() % 10 == 0) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      const uint64_t id = *it;
      ASSERT_TRUE(sched.remove(id));
      live.erase(id);
      cancelled.insert(id);
    }
    StepSchedule step = sched.schedule();
    // Budgets.
    ASSERT_LE(static_cast<int32_t>(step.seqs.size()), p.max_batch);
    ASSERT_LE(step.num_tokens, p.max_tokens);
    int32_t sum = 0;
    std::set<uint64_t> in_step;
    for (const ScheduledSeq& e : step.seqs) {
      ASSERT_TRUE(in_step.insert(e.seq->id).second) << "sequence scheduled twice in one step";
      ASSERT_GT(e.num_tokens, 0);
      ASSERT_EQ(e.start, e.seq->num_computed);
      ASSERT_LE(e.start + e.num_tokens, e.seq->num_tokens());
      sum += e.num_tokens;
    }
    ASSERT_EQ(sum, step.num_tokens);
    BatchPlan plan = sched.build_plan(step);
    plan.validate(pool.num_blocks());
    const std::vector<PromptLogprobRow> scored = Scheduler::prompt_logprob_rows(step);
    ASSERT_LE(static_cast<int32_t>(scored.size()), c.max_prompt_logprob_rows);
    for (const PromptLogprobRow& r : scored) ASSERT_EQ(plan.positions[r.row], r.position);
    sched.check_invariants();
    sched.complete(step);
    for (uint64_t id : step.failed) {
      live.erase(id);
      failed.insert(id);
    }
    for (const ScheduledSeq& e : step.seqs) {
      if (!e.sample) continue;
      Sequence* s = e.seq;
      s->tokens.push_back(static_cast<int32_t>(rng() % 100));
      s->prompt_logprobs = false;
      // Pools under 64 slots let sequences outgrow them: the scheduler must fail those, not stall.
      if (s->num_tokens() >= target[s->id] || (capacity >= 64 && s->num_tokens() >= capacity)) {
        const uint64_t id = s->id;
        ASSERT_TRUE(sched.remove(id));
        live.erase(id);
        finished.insert(id);
      }
    }
    sched.check_invariants();
  }
  std::printf(
      "seed %u: %d steps, %zu finished, %zu cancelled, %zu failed, %lld preemptions, %lld hit tokens\n",
      p.seed, steps, finished.size(), cancelled.size(), failed.size(),
      static_cast<long long>(sched.preemptions()), static_cast<long long>(sched.prefix_hit_tokens()));
  EXPECT_FALSE(sched.has_work()) << "scheduler stalled after " << steps << " steps";
  EXPECT_TRUE(live.empty());
  EXPECT_EQ(finished.size() + cancelled.size() + failed.size(), static_cast<size_t>(kArrivals));
  EXPECT_EQ(pool.num_used(), 0);
  pool.check_invariants();
}

// Async scheduling: step N+1 is scheduled before step N's sampled tokens are known (they are pending, fed
// from the previous sampling call's rows), then step N's tokens are appended, sequences that end are
// removed while they still have an entry in step N+1 (dropped), and step N+1 is completed.
TEST_P(SchedulerPropertyTest, InvariantsHoldWithOneStepLookahead) {
  const PropertyParam p = GetParam();
  std::mt19937 rng(p.seed + 100);
  BlockPool pool(p.num_blocks, p.block_size, p.prefix);
  SchedulerConfig c;
  c.max_batch_size = p.max_batch;
  c.max_num_tokens = p.max_tokens;
  c.context_chunk_size = p.chunk;
  c.enable_chunked_context = p.chunked;
  Scheduler sched(c, pool);
  const int64_t capacity = static_cast<int64_t>(p.num_blocks) * p.block_size;
  std::map<uint64_t, int32_t> target;  // id -> total tokens at which it certainly finishes
  std::set<uint64_t> live;
  size_t ended = 0;
  struct Row {
    uint64_t id;
    int32_t token;
  };
  std::vector<Row> inflight;  // the previous step's sampled rows, tokens not yet appended
  uint64_t next_id = 1;
  const int kArrivals = 120;
  int steps = 0, fed = 0;
  auto end_seq = [&](uint64_t id) {
    ASSERT_TRUE(sched.remove(id));
    live.erase(id);
    ++ended;
  };
  while ((next_id <= kArrivals || sched.has_work() || !inflight.empty()) && steps < 20000) {
    ++steps;
    if (next_id <= kArrivals && rng() % 3 == 0) {
      const int burst = 1 + static_cast<int>(rng() % 4);
      for (int b = 0; b < burst && next_id <= kArrivals; ++b) {
        int32_t len = 1 + static_cast<int32_t>(rng() % 60);
        if (!p.chunked) len = std::min(len, p.max_tokens);
        sched.add(
            make_seq(next_id, len, static_cast<int32_t>(rng() % 3), static_cast<int32_t>(rng() % 2) * 1000));
        target[next_id] = len + 1 + static_cast<int32_t>(rng() % 30);
        live.insert(next_id);
        ++next_id;
      }
    }
    if (!live.empty() && rng() % 10 == 0) {  // cancellation, pending token or not
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      end_seq(*it);
    }
    StepSchedule step = sched.schedule();
    ASSERT_LE(static_cast<int32_t>(step.seqs.size()), p.max_batch);
    ASSERT_LE(step.num_tokens, p.max_tokens);
    std::vector<uint64_t> ids;
    for (const ScheduledSeq& e : step.seqs) {
      ASSERT_EQ(e.start, e.seq->num_computed);
      ASSERT_LE(e.start + e.num_tokens, e.seq->known_tokens());
      ids.push_back(e.seq->id);
    }
    BatchPlan plan = sched.build_plan(step);
    plan.validate(pool.num_blocks());
    for (int32_t s = 0; s < plan.num_seqs(); ++s) {
      for (int32_t t = plan.cu_seqlens[s]; t < plan.cu_seqlens[s + 1]; ++t) {
        const int32_t r = plan.prev_sample_rows.empty() ? -1 : plan.prev_sample_rows[t];
        if (r < 0) continue;
        ++fed;  // only the last token of a sequence, fed from its own row of the previous step
        ASSERT_EQ(t, plan.cu_seqlens[s + 1] - 1);
        ASSERT_LT(r, static_cast<int32_t>(inflight.size()));
        ASSERT_EQ(inflight[r].id, static_cast<uint64_t>(plan.seq_ids[s]));
      }
    }
    sched.check_invariants();
    for (uint64_t id : step.failed) {
      live.erase(id);
      ++ended;
    }
    // The previous step's tokens arrive: append, or end the sequence (certain length or a random stop).
    for (const Row& row : inflight) {
      Sequence* s = sched.find(row.id);
      if (!s) continue;
      s->pending = false;
      s->pending_row = -1;
      s->ending = false;
      s->tokens.push_back(row.token);
      if (s->num_tokens() >= target[row.id] || rng() % 12 == 0 ||
          (capacity >= 64 && s->num_tokens() >= capacity)) {
        end_seq(row.id);
      }
    }
    inflight.clear();
    StepSchedule live_step;
    live_step.step = step.step;
    for (size_t i = 0; i < step.seqs.size(); ++i) {
      if (sched.find(ids[i]) == step.seqs[i].seq) live_step.seqs.push_back(step.seqs[i]);
    }
    sched.complete(live_step);
    for (const ScheduledSeq& e : live_step.seqs) {
      if (!e.sample) continue;
      Sequence* s = e.seq;
      inflight.push_back({s->id, static_cast<int32_t>(rng() % 100)});
      if (s->num_tokens() + 1 < target[s->id]) {  // not certainly its last token: may be fed next step
        s->pending = true;
        s->pending_row = static_cast<int32_t>(inflight.size()) - 1;
      } else {
        s->ending = true;  // sits out; its slot may be taken by an admission
      }
    }
    sched.check_invariants();
  }
  std::printf("seed %u (async): %d steps, %d fed tokens, %zu ended, %lld preemptions\n", p.seed, steps, fed,
              ended, static_cast<long long>(sched.preemptions()));
  EXPECT_FALSE(sched.has_work()) << "scheduler stalled after " << steps << " steps";
  EXPECT_TRUE(live.empty());
  EXPECT_GT(fed, 0);
  EXPECT_EQ(ended, static_cast<size_t>(kArrivals));
  EXPECT_EQ(pool.num_used(), 0);
  pool.check_invariants();
}

INSTANTIATE_TEST_SUITE_P(Seeds, SchedulerPropertyTest,
                         ::testing::Values(PropertyParam{1, 64, 4, 8, 32, 8, true, true},
                                           PropertyParam{2, 24, 4, 16, 64, 16, true, true},
                                           PropertyParam{3, 200, 16, 32, 256, 64, true, false},
                                           PropertyParam{4, 40, 8, 4, 64, 512, false, true},
                                           PropertyParam{5, 30, 2, 64, 7, 5, true, true},
                                           PropertyParam{6, 12, 8, 8, 48, 16, true, true},
                                           PropertyParam{7, 10, 4, 8, 32, 8, true, true}));

}  // namespace
}  // namespace dsinfer
