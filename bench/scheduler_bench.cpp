// Scheduler CPU time per step (Google Benchmark): schedule + build_plan + complete for N running sequences
// in steady-state decode (contexts of ~1000 tokens, 64-token blocks), with and without waiting prefill
// traffic. The target is well under 1 ms per step at 256 running sequences.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>

#include "kv/block_pool.h"
#include "sched/scheduler.h"

namespace dsinfer {
namespace {

void add_sequence(Scheduler& sched, uint64_t id, int32_t len, std::mt19937& rng) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->order = id;
  s->tokens.resize(len);
  for (int32_t& t : s->tokens) t = static_cast<int32_t>(rng() % 32000);
  s->prompt_len = len;
  sched.add(std::move(s));
}

// One engine step without the forward pass; every sampled sequence gets a token.
void step(Scheduler& sched) {
  StepSchedule st = sched.schedule();
  BatchPlan plan = sched.build_plan(st);
  benchmark::DoNotOptimize(plan.slot_mapping.data());
  sched.complete(st);
  for (const ScheduledSeq& e : st.seqs) {
    if (e.sample) e.seq->tokens.push_back(17);
  }
}

void BM_SchedulerDecodeStep(benchmark::State& state) {
  const int32_t n = static_cast<int32_t>(state.range(0));
  std::mt19937 rng(1);
  BlockPool pool(n * 64, 64);  // room for 4096 tokens per sequence: no preemption
  SchedulerConfig c;
  c.max_batch_size = n;
  c.max_num_tokens = 1 << 20;
  c.context_chunk_size = 1 << 20;
  std::unique_ptr<Scheduler> sched;
  auto reset = [&] {
    if (sched) {
      for (int32_t i = 0; i < n; ++i) sched->remove(i + 1);
    }
    sched = std::make_unique<Scheduler>(c, pool);
    for (int32_t i = 0; i < n; ++i) add_sequence(*sched, i + 1, 1000 + static_cast<int32_t>(rng() % 64), rng);
    step(*sched);  // prefill everything
  };
  reset();
  int64_t steps = 0;
  for (auto _ : state) {
    if (++steps % 512 == 0) {  // keep contexts around 1000-1600 tokens
      state.PauseTiming();
      reset();
      state.ResumeTiming();
    }
    step(*sched);
  }
  state.counters["seqs"] = n;
}
BENCHMARK(BM_SchedulerDecodeStep)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMicrosecond);

// Decode of N running sequences plus a queue of waiting prompts that cannot all be admitted (the admission
// path runs every step); requests finish and are replaced so the mix stays steady.
void BM_SchedulerMixedStep(benchmark::State& state) {
  const int32_t n = static_cast<int32_t>(state.range(0));
  std::mt19937 rng(2);
  BlockPool pool(n * 20, 64);
  SchedulerConfig c;
  c.max_batch_size = n;
  c.max_num_tokens = n + 512;
  c.context_chunk_size = 512;
  Scheduler sched(c, pool);
  uint64_t next = 1;
  for (int32_t i = 0; i < n + 32; ++i)
    add_sequence(sched, next++, 200 + static_cast<int32_t>(rng() % 800), rng);
  for (int i = 0; i < 20; ++i) step(sched);
  for (auto _ : state) {
    StepSchedule st = sched.schedule();
    BatchPlan plan = sched.build_plan(st);
    benchmark::DoNotOptimize(plan.slot_mapping.data());
    sched.complete(st);
    std::vector<uint64_t> done;
    for (const ScheduledSeq& e : st.seqs) {
      if (!e.sample) continue;
      e.seq->tokens.push_back(17);
      if (e.seq->num_tokens() - e.seq->prompt_len >= 64) done.push_back(e.seq->id);
    }
    for (uint64_t id : done) {
      sched.remove(id);
      add_sequence(sched, next++, 200 + static_cast<int32_t>(rng() % 800), rng);
    }
  }
  state.counters["preemptions"] = static_cast<double>(sched.preemptions());
}
BENCHMARK(BM_SchedulerMixedStep)->Arg(256)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dsinfer

BENCHMARK_MAIN();
