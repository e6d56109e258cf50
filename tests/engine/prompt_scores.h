// Test helpers for prompt scoring (SamplingParams::prompt_logprobs): run prompts through an engine and
// collect each request's prompt scores, tokens and end; the reference scores of a prompt from one full
// forward pass over it (every position's logits, log-softmax on the host).
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/host_sampling.h"
#include "dsinfer/engine.h"
#include "engine/sequence_runner.h"
#include "model/model.h"

namespace dsinfer {

struct ScoredOutcome {
  std::vector<TokenLogprob> scores;  // from the event that carried them
  int score_events = 0;              // events with a non-empty prompt_logprobs
  std::vector<int32_t> tokens;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;
  Usage usage;
  int events = 0;
};

// Submits every prompt at once (one arrival) with its parameters and waits for every final event.
inline std::vector<ScoredOutcome> run_scored(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                             const std::vector<SamplingParams>& params) {
  std::mutex mutex;
  std::condition_variable done;
  std::map<uint64_t, ScoredOutcome> by_id;
  size_t finished = 0;
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mutex);  // events wait until every id is known
    std::vector<GenerationRequest> requests;
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerationRequest r;
      r.prompt_ids = prompts[i];
      r.sampling = params[i];
      r.on_event = [&](const RequestEvent& e) {
        std::lock_guard<std::mutex> l(mutex);
        ScoredOutcome& o = by_id[e.request_id];
        o.events += 1;
        if (!e.prompt_logprobs.empty()) {
          o.score_events += 1;
          o.scores = e.prompt_logprobs;
        }
        o.tokens.insert(o.tokens.end(), e.token_ids.begin(), e.token_ids.end());
        if (e.finished) {
          o.finished = true;
          o.reason = e.finish_reason;
          o.error = e.error;
          o.usage = e.usage;
          ++finished;
          done.notify_all();
        }
      };
      requests.push_back(std::move(r));
    }
    ids = engine.submit_all(std::move(requests));
  }
  std::unique_lock<std::mutex> lock(mutex);
  EXPECT_TRUE(done.wait_for(lock, std::chrono::seconds(300), [&] { return finished == ids.size(); }))
      << "requests did not finish";
  std::vector<ScoredOutcome> out;
  for (uint64_t id : ids) out.push_back(by_id[id]);
  return out;
}

// The scores of prompt tokens 1..n-1 from one forward pass over the whole prompt: the log-softmax of the
// logits at position p, at token p + 1, with the `top` + 1 most likely alternatives (the one past those asked
// for tells expect_scores_near whether the last one asked for is a near tie).
inline std::vector<TokenLogprob> reference_scores(Model& model, const std::vector<int32_t>& prompt,
                                                  int32_t top) {
  SequenceRunner runner(model);
  const Tensor logits = runner.append(prompt, /*all_logits=*/true);  // [n, vocab]
  const int32_t vocab = static_cast<int32_t>(logits.dim(1));
  std::vector<TokenLogprob> out;
  for (size_t p = 0; p + 1 < prompt.size(); ++p) {
    const float* row = logits.f32() + static_cast<int64_t>(p) * vocab;
    TokenLogprob lp;
    lp.token = prompt[p + 1];
    lp.logprob = HostSampler::logprob_of(row, vocab, lp.token);
    lp.top = HostSampler::top_logprobs(row, vocab, top + 1);
    out.push_back(std::move(lp));
  }
  return out;
}

// Scores agree within `tol` (log units), alternative by alternative (`want` from reference_scores: one
// alternative more than asked for); an alternative's id may differ only where a neighbour in the reference is
// within `tol` of it (a near tie).
inline void expect_scores_near(const std::vector<TokenLogprob>& got, const std::vector<TokenLogprob>& want,
                               float tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t p = 0; p < want.size(); ++p) {
    EXPECT_EQ(got[p].token, want[p].token) << what << " position " << p;
    EXPECT_NEAR(got[p].logprob, want[p].logprob, tol) << what << " position " << p;
    ASSERT_EQ(got[p].top.size() + 1, want[p].top.size()) << what << " position " << p;
    for (size_t i = 0; i < got[p].top.size(); ++i) {
      EXPECT_NEAR(got[p].top[i].second, want[p].top[i].second, tol)
          << what << " position " << p << " alt " << i;
      const bool near_tie =
          (i + 1 < want[p].top.size() && want[p].top[i].second - want[p].top[i + 1].second <= tol) ||
          (i > 0 && want[p].top[i - 1].second - want[p].top[i].second <= tol);
      if (!near_tie) {
        EXPECT_EQ(got[p].top[i].first, want[p].top[i].first) << what << " position " << p << " alt " << i;
      }
    }
  }
}

}  // namespace dsinfer
