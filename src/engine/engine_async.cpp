// EngineImpl's asynchronous step (async scheduling): step N+1 is scheduled and its forward pass launched
// before step N's sampled tokens reach the host; a decode row whose input is the token sampled for its
// sequence in step N takes it on the device (BatchPlan::prev_sample_rows). While step N+1 runs, the host
// waits for step N's tokens, hands them to their requests (detokenize, stop checks, events) and then queues
// step N+1's sampling, whose rows need the penalty and seed state updated with step N's tokens. A sequence
// that ended at step N still has its row in step N+1: that row is dropped. See docs/architecture.md,
// "Scheduler and engine loop".
#include "core/log.h"
#include "engine/engine_impl.h"

namespace dsinfer {

void EngineImpl::run_step_async() {
  StepSchedule step = schedule_step();
  std::vector<uint64_t> ids;  // the request of each entry, read while every Sequence pointer is valid
  ids.reserve(step.seqs.size());
  for (const ScheduledSeq& e : step.seqs) ids.push_back(e.seq->id);
  const std::vector<PromptLogprobRow> scored = Scheduler::prompt_logprob_rows(step);  // pointers valid too
  Tensor logits;  // [sampled sequences, vocab], where the backend keeps them
  const bool launched = !step.empty() && launch_forward(step, &logits);
  // The previous step's tokens, while this step runs on the device.
  finish_inflight();
  if (!launched) return;

  // Entries of sequences that ended meanwhile (finished, failed, cancelled) are dropped: their cache rows
  // were written into blocks they no longer hold, before any later step can use them (one stream), and
  // their sampled rows are discarded.
  StepSchedule live;
  live.step = step.step;
  std::vector<SamplingRow> rows;
  std::vector<uint64_t> row_ids;  // 0: a dropped row
  std::vector<Sequence*> row_seqs;
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    const ScheduledSeq& e = step.seqs[i];
    const bool alive = scheduler_->find(ids[i]) == e.seq;
    if (alive) {
      live.seqs.push_back(e);
    } else {
      ++dropped_entries_;
    }
    if (!e.sample) continue;
    if (alive) {
      rows.push_back(requests_.at(ids[i])->sampling_row());
      row_ids.push_back(ids[i]);
      row_seqs.push_back(e.seq);
    } else {
      SamplingRow greedy;  // the logits row exists; a cheap greedy draw, never read
      greedy.temperature = 0.0f;
      rows.push_back(greedy);
      row_ids.push_back(0);
      row_seqs.push_back(nullptr);
    }
  }
  scheduler_->complete(live);
  // The prompt-scoring rows after the sampled ones (sampled rows keep their indices: pending_row).
  const std::vector<SamplingRow> score_rows = prompt_score_rows(scored);
  rows.insert(rows.end(), score_rows.begin(), score_rows.end());
  try {
    backend_->sample_async(logits, rows);
  } catch (const std::exception& ex) {  // the whole call failed: every sampled request ends
    abort_sampled(row_ids, scored, ex);
    return;
  }
  // The next step may compute these tokens before the host sees them, unless a token certainly ends its
  // request (max_tokens, context): that sequence sits the next step out instead of running a wasted row, and
  // gives up its batch slot.
  for (size_t r = 0; r < row_ids.size(); ++r) {
    if (!row_ids[r]) continue;
    Sequence* s = row_seqs[r];
    if (requests_.at(row_ids[r])->next_token_is_last(s->num_tokens())) {
      s->ending = true;  // removed when its token arrives; its batch slot is free for admissions already
      continue;
    }
    s->pending = true;
    s->pending_row = static_cast<int32_t>(r);
  }
  inflight_ids_ = std::move(row_ids);
  inflight_scored_ = scored;
  inflight_ = true;
}

void EngineImpl::finish_inflight() {
  if (!inflight_) return;
  inflight_ = false;
  const std::vector<uint64_t> ids = std::move(inflight_ids_);
  inflight_ids_.clear();
  const std::vector<PromptLogprobRow> scored = std::move(inflight_scored_);
  inflight_scored_.clear();
  std::vector<SampledToken> sampled;
  // The wait is where the engine thread blocks on the device: the watchdog sees a hang here.
  begin_step_watch(Clock::now());
  try {
    sampled = backend_->sample_wait();
  } catch (const std::exception& ex) {
    end_step_watch();
    log_warn("engine: sampling failed: ", ex.what());
    abort_sampled(ids, scored, ex);
    return;
  }
  end_step_watch();
  deliver_prompt_scores(scored, sampled, ids.size());  // before the first token's event, which carries them
  sampled.resize(std::min(sampled.size(), ids.size()));
  deliver_tokens(ids, sampled);
}

}  // namespace dsinfer
