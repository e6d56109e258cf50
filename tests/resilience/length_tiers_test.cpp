// Length tiers in the scheduler: long prefills take at most their share of a step's token budget, a long
// head of the queue does not hold back short requests behind it, long requests still finish, and the batch
// limit / preempt_request hooks used by the resilience layer keep the scheduler's invariants.
#include <gtest/gtest.h>

#include "sched/scheduler.h"

namespace dsinfer {
namespace {

std::unique_ptr<Sequence> make_seq(uint64_t id, int32_t prompt_len) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->order = id;
  for (int32_t i = 0; i < prompt_len; ++i) s->tokens.push_back(i % 97);
  s->prompt_len = prompt_len;
  return s;
}

StepSchedule step_once(Scheduler& sched) {
  StepSchedule step = sched.schedule();
  sched.complete(step);
  for (const ScheduledSeq& e : step.seqs) {
    if (e.sample) e.seq->tokens.push_back(7);
  }
  sched.check_invariants();
  return step;
}

int32_t long_tokens(const StepSchedule& step, int32_t threshold) {
  int32_t n = 0;
  for (const ScheduledSeq& e : step.seqs) {
    if (e.seq->prompt_len >= threshold && e.num_tokens > 1) n += e.num_tokens;
  }
  return n;
}

TEST(LengthTiers, LongPrefillsKeepToTheirShareAndShortOnesAreNotHeldBack) {
  BlockPool pool(512, 16);
  SchedulerConfig c;
  c.max_num_tokens = 512;
  c.context_chunk_size = 512;
  c.long_prompt_tokens = 1000;
  c.long_prefill_tokens = 128;
  Scheduler sched(c, pool);
  for (uint64_t id = 1; id <= 3; ++id) sched.add(make_seq(id, 1600));  // three long prompts first
  for (uint64_t id = 4; id <= 8; ++id) sched.add(make_seq(id, 40));    // then five short ones
  const StepSchedule first = step_once(sched);
  EXPECT_LE(long_tokens(first, 1000), 128);
  int shorts = 0;
  for (const ScheduledSeq& e : first.seqs) shorts += e.seq->prompt_len < 1000 ? 1 : 0;
  EXPECT_EQ(shorts, 5);  // every short prompt is admitted in the first step
  int steps = 1;
  while (sched.has_work() && steps < 200) {
    const StepSchedule s = step_once(sched);
    EXPECT_LE(long_tokens(s, 1000), 128);
    for (const ScheduledSeq& e : s.seqs) {
      if (e.sample && e.seq->num_tokens() >= e.seq->prompt_len + 4) sched.remove(e.seq->id);
    }
    ++steps;
  }
  EXPECT_FALSE(sched.has_work());  // long requests finished too
  EXPECT_EQ(pool.num_used(), 0);
}

TEST(LengthTiers, WithoutTiersLongPrefillsFillTheStep) {
  BlockPool pool(512, 16);
  SchedulerConfig c;
  c.max_num_tokens = 512;
  c.context_chunk_size = 512;
  Scheduler sched(c, pool);
  for (uint64_t id = 1; id <= 3; ++id) sched.add(make_seq(id, 1600));
  sched.add(make_seq(4, 40));
  const StepSchedule first = step_once(sched);
  EXPECT_EQ(first.num_tokens, 512);
  EXPECT_EQ(first.seqs.size(), 1u);  // the short prompt waits behind the long head
}

TEST(LengthTiers, BatchLimitAndPreemptRequest) {
  BlockPool pool(64, 4);
  SchedulerConfig c;
  Scheduler sched(c, pool);
  for (uint64_t id = 1; id <= 6; ++id) sched.add(make_seq(id, 5));
  sched.set_batch_limit(2);
  EXPECT_EQ(step_once(sched).seqs.size(), 2u);
  EXPECT_TRUE(sched.preempt_request(1));
  EXPECT_FALSE(sched.preempt_request(1));  // waiting now
  sched.check_invariants();
  sched.set_batch_limit(0);
  EXPECT_EQ(step_once(sched).seqs.size(), 6u);
  for (uint64_t id = 1; id <= 6; ++id) sched.remove(id);
  EXPECT_EQ(pool.num_used(), 0);
}

}  // namespace
}  // namespace dsinfer
