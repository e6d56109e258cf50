// Tests for SamplingParams validation and the Sampler pipeline (penalties, greedy, top-k/p, min-p, seeds).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"

namespace dsinfer {
namespace {

SamplingParams params_with(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = 1234;
  return p;
}

std::vector<double> softmax(const std::vector<float>& logits) {
  double max = logits[0];
  for (float l : logits) max = std::max<double>(max, l);
  std::vector<double> out;
  double sum = 0;
  for (float l : logits) sum += std::exp(l - max);
  for (float l : logits) out.push_back(std::exp(l - max) / sum);
  return out;
}

std::vector<int> histogram(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i)
    ++counts[sampler.sample(logits.data(), static_cast<int32_t>(logits.size()))];
  return counts;
}

// Pearson chi-square statistic of observed counts against expected probabilities (only p > 0 bins).
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int draws) {
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0) continue;
    const double expected = probs[i] * draws;
    chi += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi;
}

// ---- validation -----------------------------------------------------------------------------------

void expect_invalid(const SamplingParams& p, const std::string& field) {
  try {
    p.validate(1000);
    FAIL() << "expected validation of " << field << " to fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(SamplingParamsTest, DefaultsAreValid) {
  EXPECT_NO_THROW(SamplingParams{}.validate(1000));
}

TEST(SamplingParamsTest, RejectsOutOfRangeValues) {
  SamplingParams p;
  p = {}, p.temperature = -0.1f, expect_invalid(p, "temperature");
  p = {}, p.temperature = NAN, expect_invalid(p, "temperature");
  p = {}, p.top_p = 0.0f, expect_invalid(p, "top_p");
  p = {}, p.top_p = 1.01f, expect_invalid(p, "top_p");
  p = {}, p.top_p = NAN, expect_invalid(p, "top_p");
  p = {}, p.min_p = -0.01f, expect_invalid(p, "min_p");
  p = {}, p.min_p = 1.5f, expect_invalid(p, "min_p");
  p = {}, p.repetition_penalty = 0.0f, expect_invalid(p, "repetition_penalty");
  p = {}, p.presence_penalty = 2.5f, expect_invalid(p, "presence_penalty");
  p = {}, p.frequency_penalty = -2.5f, expect_invalid(p, "frequency_penalty");
  p = {}, p.max_tokens = 0, expect_invalid(p, "max_tokens");
  p = {}, p.stop = {"ok", ""}, expect_invalid(p, "stop[1]");
  p = {}, p.stop_token_ids = {5, 1000}, expect_invalid(p, "stop_token_ids[1]");
  p = {}, p.logprobs = -1, expect_invalid(p, "logprobs");
  p = {}, p.logprobs = 21, expect_invalid(p, "logprobs");
  // Stop conditions are bounded (each is checked on every generated token).
  p = {}, p.stop = std::vector<std::string>(SamplingParams::kMaxStopStrings + 1, "x"),
  expect_invalid(p, "stop");
  p = {}, p.stop = {"ok", std::string(SamplingParams::kMaxStopStringBytes + 1, 'x')},
  expect_invalid(p, "stop[1]");
  p = {}, p.stop_token_ids = std::vector<int32_t>(SamplingParams::kMaxStopTokenIds + 1, 1);
  expect_invalid(p, "stop_token_ids");
  // logit_bias: ids in the vocabulary, each once, values in [-100, 100], at most 300, ids and values paired.
  p = {}, p.logit_bias_ids = {1000}, p.logit_bias_values = {1.0f}, expect_invalid(p, "logit_bias token 1000");
  p = {}, p.logit_bias_ids = {-1}, p.logit_bias_values = {1.0f}, expect_invalid(p, "logit_bias token -1");
  p = {}, p.logit_bias_ids = {3, 3}, p.logit_bias_values = {1.0f, 2.0f}, expect_invalid(p, "twice");
  p = {}, p.logit_bias_ids = {3}, p.logit_bias_values = {100.5f}, expect_invalid(p, "logit_bias of token 3");
  p = {}, p.logit_bias_ids = {3}, p.logit_bias_values = {NAN}, expect_invalid(p, "logit_bias of token 3");
  p = {}, p.logit_bias_ids = {3}, p.logit_bias_values = {}, expect_invalid(p, "logit_bias has 1 ids but 0");
  p = {};
  for (int32_t i = 0; i <= static_cast<int32_t>(SamplingParams::kMaxLogitBias); ++i) {
    p.logit_bias_ids.push_back(i);
    p.logit_bias_values.push_back(1.0f);
  }
  expect_invalid(p, "logit_bias must have at most 300");
  p.logit_bias_ids.pop_back();
  p.logit_bias_values.pop_back();
  p.logit_bias_values[0] = -100.0f;
  p.logit_bias_values[1] = 100.0f;
  EXPECT_NO_THROW(p.validate(1000));
}

TEST(SamplingParamsTest, MessageNamesAllowedRange) {
  SamplingParams p;
  p.top_p = 0;
  try {
    p.validate(10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(0, 1]"), std::string::npos) << e.what();
  }
}

TEST(SamplingParamsTest, AcceptsBoundaryValues) {
  SamplingParams p;
  p.temperature = 0;
  p.top_p = 1;
  p.min_p = 1;
  p.presence_penalty = -2;
  p.frequency_penalty = 2;
  p.top_k = -1;
  p.logprobs = 20;
  p.stop_token_ids = {0, 999};
  EXPECT_NO_THROW(p.validate(1000));
  p.stop = std::vector<std::string>(SamplingParams::kMaxStopStrings,
                                    std::string(SamplingParams::kMaxStopStringBytes, 'x'));
  p.stop_token_ids = std::vector<int32_t>(SamplingParams::kMaxStopTokenIds, 999);
  EXPECT_NO_THROW(p.validate(1000));
}

// ---- greedy and its limits ------------------------------------------------------------------------------

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler sampler(params_with(0.0f), {});
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  EXPECT_EQ(sampler.sample(logits.data(), 5), 1);
  const std::vector<float> neg = {-5.0f, -1.0f, -3.0f, -1.0f};
  EXPECT_EQ(sampler.sample(neg.data(), 4), 1);
  const std::vector<float> masked = {-INFINITY, -INFINITY, 0.25f};
  EXPECT_EQ(sampler.sample(masked.data(), 3), 2);
}

TEST(SamplerTest, TinyTemperatureConvergesToGreedy) {
  Sampler sampler(params_with(1e-4f), {});
  const std::vector<float> logits = {1.0f, 1.5f, 1.49f, -3.0f};
  for (int i = 0; i < 200; ++i) EXPECT_EQ(sampler.sample(logits.data(), 4), 1);
  Sampler tiny(params_with(1e-30f), {});  // (l - max) / T must not overflow into NaN
  for (int i = 0; i < 50; ++i) EXPECT_EQ(tiny.sample(logits.data(), 4), 1);
}

TEST(SamplerTest, TopKOneEqualsGreedy) {
  SamplingParams p = params_with(5.0f);
  p.top_k = 1;
  Sampler sampler(p, {});
  const std::vector<float> logits = {0.1f, 0.3f, 0.2f, 0.3f, 0.25f};
  for (int i = 0; i < 200; ++i) EXPECT_EQ(sampler.sample(logits.data(), 5), 1);
}

TEST(SamplerTest, SmallTopPKeepsOnlyTopToken) {
  SamplingParams p = params_with(1.0f);
  p.top_p = 1e-6f;
  Sampler sampler(p, {});
  std::vector<float> logits(1000, 0.0f);
  logits[637] = 0.01f;  // barely the most likely
  for (int i = 0; i < 200; ++i) EXPECT_EQ(sampler.sample(logits.data(), 1000), 637);
}

TEST(SamplerTest, TopPKeepsSmallestNucleus) {
  // probs 0.5, 0.3, 0.15, 0.05: top_p 0.75 keeps {0, 1} (0.8 >= 0.75), 0.85 keeps {0, 1, 2}.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p = params_with(1.0f);
  p.top_p = 0.75f;
  Sampler two(p, {});
  std::vector<int> counts = histogram(two, logits, 4000);
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_GT(counts[1], 1200);  // 0.3 / 0.8 = 37.5% of 4000 = 1500
  p.top_p = 0.85f;
  Sampler three(p, {});
  counts = histogram(three, logits, 4000);
  EXPECT_EQ(counts[3], 0);
  EXPECT_GT(counts[2], 500);  // 0.15 / 0.95 = 15.8% of 4000 = 632
}

TEST(SamplerTest, TopPOverLargeFlatVocabKeepsLowestIds) {
  // A flat 150k vocabulary: the nucleus of 0.5 is ~75k tokens, well far past the final sorted range.
  const int32_t vocab = 150000;
  std::vector<float> logits(vocab, 0.0f);
  SamplingParams p = params_with(1.0f);
  p.top_p = 0.5f;
  Sampler sampler(p, {});
  int low = 0;
  for (int i = 0; i < 200; ++i) low += sampler.sample(logits.data(), vocab) < vocab / 2 ? 1 : 0;
  EXPECT_EQ(low, 200);  // ties keep the lowest ids first
}

TEST(SamplerTest, TopPMatchesSortedReferenceNucleus) {
  // 1000 distinct logits -0.01 * rank on permuted ids: top_p 0.8 keeps ~161 tokens, enough to exercise
  // the bisection, and the boundary token is still likely enough (~0.25%) to be drawn.
  const int32_t vocab = 1000;
  std::vector<float> logits(vocab);
  std::vector<int32_t> by_rank(vocab);
  for (int32_t rank = 0; rank < vocab; ++rank) {
    by_rank[rank] = (rank * 7919) % vocab;
    logits[by_rank[rank]] = -0.01f * static_cast<float>(rank);
  }
  const std::vector<double> probs = softmax(logits);
  const float top_p = 0.8f;
  std::vector<bool> in_nucleus(vocab, false);
  double cumulative = 0;
  int32_t nucleus = 0;
  while (cumulative < top_p) {
    in_nucleus[by_rank[nucleus]] = true;
    cumulative += probs[by_rank[nucleus++]];
  }
  ASSERT_GT(nucleus, 100);
  SamplingParams p = params_with(1.0f);
  p.top_p = top_p;
  Sampler sampler(p, {});
  std::vector<int> counts(vocab, 0);
  for (int i = 0; i < 20000; ++i) {
    const int32_t id = sampler.sample(logits.data(), vocab);
    ASSERT_TRUE(in_nucleus[id]) << "token " << id << " is outside the nucleus of " << nucleus;
    ++counts[id];
  }
  EXPECT_GT(counts[by_rank[0]], 0);
  EXPECT_GT(counts[by_rank[nucleus - 1]], 0) << "boundary token never drawn";
}

TEST(SamplerTest, MinPFiltersRelativeToMaxProbability) {
  // probs 0.5, 0.3, 0.15, 0.05; min_p 0.35 => threshold 0.175: only tokens 0 and 1 survive.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p = params_with(1.0f);
  p.min_p = 0.35f;
  Sampler sampler(p, {});
  const std::vector<int> counts = histogram(sampler, logits, 4000);
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_GT(counts[1], 1200);
  p.min_p = 1.0f;  // only the max survives
  Sampler only_max(p, {});
  EXPECT_EQ(histogram(only_max, logits, 500)[0], 500);
}

TEST(SamplerTest, TopKRenormalisesOverKeptTokens) {
  const std::vector<float> logits = {2.0f, 0.5f, 1.0f, -1.0f, 1.5f};
  SamplingParams p = params_with(1.0f);
  p.top_k = 3;  // keeps ids 0, 4, 2
  Sampler sampler(p, {});
  const int draws = 20000;
  const std::vector<int> counts = histogram(sampler, logits, draws);
  EXPECT_EQ(counts[1] + counts[3], 0);
  const std::vector<double> kept = softmax({2.0f, 1.0f, 1.5f});
  const std::vector<double> expected = {kept[0], 0, kept[1], 0, kept[2]};
  EXPECT_LT(chi_square(counts, expected, draws), 13.8);  // 2 dof, p = 0.001
}

// ---- penalties ------------------------------------------------------------------------------------

TEST(SamplerTest, RepetitionPenaltyFollowsCtrlFormula) {
  SamplingParams p = params_with(1.0f);
  p.repetition_penalty = 2.0f;
  Sampler sampler(p, std::vector<int32_t>{0, 1, 1});
  sampler.accept(3);
  std::vector<float> logits = {4.0f, -3.0f, 5.0f, 0.5f, 6.0f};
  sampler.apply_penalties(logits.data(), 5);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);   // prompt, positive: divided
  EXPECT_FLOAT_EQ(logits[1], -6.0f);  // prompt, negative: multiplied (once despite two occurrences)
  EXPECT_FLOAT_EQ(logits[2], 5.0f);   // unseen
  EXPECT_FLOAT_EQ(logits[3], 0.25f);  // generated
  EXPECT_FLOAT_EQ(logits[4], 6.0f);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesUseGeneratedCountsOnly) {
  SamplingParams p = params_with(1.0f);
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler sampler(p, std::vector<int32_t>{0});  // prompt tokens are not penalised here
  sampler.accept(1);
  sampler.accept(2);
  sampler.accept(2);
  sampler.accept(2);
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  sampler.apply_penalties(logits.data(), 4);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f - 0.5f - 0.75f);
  EXPECT_FLOAT_EQ(logits[3], 1.0f);
  EXPECT_EQ(sampler.num_generated(), 4);
}

TEST(SamplerTest, PenaltiesApplyInOrderBeforeGreedy) {
  SamplingParams p = params_with(0.0f);
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 1.0f;
  Sampler sampler(p, {});
  sampler.accept(0);
  // token 0: 4 / 2 - 1 = 1 < 1.5 (token 1); presence before repetition would give (4 - 1) / 2 = 1.5 tie -> 0.
  const std::vector<float> logits = {4.0f, 1.5f, 1.2f};
  EXPECT_EQ(sampler.sample(logits.data(), 3), 1);
  EXPECT_FLOAT_EQ(logits[0], 4.0f);  // the caller's logits are not modified
}

TEST(SamplerTest, LogitBiasIsAddedAfterThePenalties) {
  SamplingParams p = params_with(0.0f);
  p.repetition_penalty = 2.0f;
  p.logit_bias_ids = {0, 2};
  p.logit_bias_values = {1.0f, -100.0f};
  Sampler sampler(p, std::vector<int32_t>{0});
  // token 0: 4 / 2 + 1 = 3 (bias after the penalty; before it, (4 + 1) / 2 = 2.5 < 2.8); token 2 banned.
  std::vector<float> logits = {4.0f, 2.8f, 9.0f};
  std::vector<float> biased = logits;
  sampler.apply_penalties(biased.data(), 3);
  EXPECT_FLOAT_EQ(biased[0], 3.0f);
  EXPECT_FLOAT_EQ(biased[1], 2.8f);
  EXPECT_FLOAT_EQ(biased[2], -91.0f);
  EXPECT_EQ(sampler.sample(logits.data(), 3), 0);
  // A bias of 100 makes a token the only one drawn at temperature 1 among logits within a few units.
  SamplingParams forced = params_with(1.0f);
  forced.logit_bias_ids = {3};
  forced.logit_bias_values = {100.0f};
  Sampler forcing(forced, {});
  const std::vector<float> flat = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
  for (int i = 0; i < 200; ++i) EXPECT_EQ(forcing.sample(flat.data(), 5), 3);
}

TEST(SamplerTest, LogitBiasOnTheCpuBackendMatchesTheSampler) {
  // Backend::sample (the engine's path) applies the same bias; logprobs stay the raw model's.
  CpuBackend cpu;
  const int32_t V = 6;
  Tensor logits = Tensor::empty(DType::F32, {1, V});  // [1, V]
  const std::vector<float> values = {0.1f, 3.0f, 0.2f, 0.3f, 0.4f, 0.5f};
  std::copy(values.begin(), values.end(), logits.f32());
  SamplingParams p = params_with(0.0f);
  p.logprobs = 2;
  p.logit_bias_ids = {1, 4};
  p.logit_bias_values = {-5.0f, 2.0f};
  Sampler sampler(p, {});
  const std::vector<SampledToken> got = cpu.sample(logits, {sampler.row()});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].token, 4);
  EXPECT_EQ(got[0].top[0].first, 1);  // the raw model's best
  EXPECT_NEAR(got[0].logprob, Sampler::logprob_of(values.data(), V, 4), 1e-6);
}

TEST(SamplerTest, AllowedMaskLimitsTheDraw) {
  // Tokens 1 and 4 of 40 allowed (bit t of word t / 32).
  std::vector<uint32_t> allowed(2, 0u);
  allowed[0] = (1u << 1) | (1u << 4);
  std::vector<float> logits(40, 0.0f);
  logits[7] = 9.0f;  // the best, not allowed
  logits[4] = 2.0f;
  logits[1] = 1.0f;
  Sampler greedy(params_with(0.0f), {});
  EXPECT_EQ(greedy.sample(logits.data(), 40, allowed), 4);
  EXPECT_EQ(greedy.sample(logits.data(), 40), 7);
  Sampler random(params_with(1.0f), {});
  std::map<int32_t, int> seen;
  for (int i = 0; i < 400; ++i) ++seen[random.sample(logits.data(), 40, allowed)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[4], seen[1]);
  // Nothing allowed: the row cannot be sampled; a mask shorter than the vocabulary is an error.
  std::vector<uint32_t> none(2, 0u);
  EXPECT_THROW(random.sample(logits.data(), 40, none), Error);
  EXPECT_THROW(random.sample(logits.data(), 40, std::span<const uint32_t>(allowed).first(1)), Error);
}

TEST(SamplerTest, PenaltyTokenOutsideVocabIsAnError) {
  SamplingParams p = params_with(1.0f);
  p.repetition_penalty = 1.1f;
  Sampler sampler(p, std::vector<int32_t>{10});
  std::vector<float> logits(5, 0.0f);
  EXPECT_THROW(sampler.sample(logits.data(), 5), Error);
}

// ---- randomness -----------------------------------------------------------------------------------

TEST(SamplerTest, SameSeedReproducesAndDifferentSeedsDiffer) {
  std::vector<float> logits(64);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(i * 0.7));
  auto run = [&](uint64_t seed) {
    SamplingParams p = params_with(1.0f);
    p.seed = seed;
    p.top_p = 0.95f;
    Sampler sampler(p, {});
    std::vector<int32_t> out;
    for (int i = 0; i < 100; ++i) out.push_back(sampler.sample(logits.data(), 64));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
  SamplingParams p;
  p.seed = 99;
  EXPECT_EQ(Sampler(p, {}).seed(), 99u);
}

TEST(SamplerTest, UnseededSamplersGetDifferentSeeds) {
  const SamplingParams p;
  EXPECT_NE(Sampler(p, {}).seed(), Sampler(p, {}).seed());
}

TEST(SamplerTest, EmpiricalDistributionMatchesSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f, -0.5f, 0.2f};
  Sampler sampler(params_with(1.0f), {});
  const int draws = 20000;
  const std::vector<int> counts = histogram(sampler, logits, draws);
  const std::vector<double> probs = softmax(logits);
  EXPECT_LT(chi_square(counts, probs, draws), 24.3);  // 7 dof, p = 0.001
  for (size_t i = 0; i < probs.size(); ++i) {
    EXPECT_NEAR(counts[i] / static_cast<double>(draws), probs[i], 0.02) << "token " << i;
  }
}

TEST(SamplerTest, TemperatureSharpensTheDistribution) {
  const std::vector<float> logits = {1.0f, 0.0f, 0.5f};
  Sampler sampler(params_with(0.5f), {});
  const int draws = 20000;
  const std::vector<int> counts = histogram(sampler, logits, draws);
  const std::vector<double> probs = softmax({2.0f, 0.0f, 1.0f});
  EXPECT_LT(chi_square(counts, probs, draws), 13.8);
}

TEST(SamplerTest, RejectsNaNLogits) {
  Sampler sampler(params_with(1.0f), {});
  const std::vector<float> logits = {0.0f, NAN};
  EXPECT_THROW(sampler.sample(logits.data(), 2), Error);
  const std::vector<float> all_masked = {-INFINITY, -INFINITY};
  EXPECT_THROW(sampler.sample(all_masked.data(), 2), Error);
}

// ---- logprobs -------------------------------------------------------------------------------------

TEST(SamplerTest, TopLogprobsAreLogSoftmaxOfRawLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  const std::vector<double> probs = softmax(logits);
  const auto top = Sampler::top_logprobs(logits.data(), 4, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 1);
  EXPECT_EQ(top[1].first, 3);
  EXPECT_EQ(top[2].first, 2);
  EXPECT_NEAR(top[0].second, std::log(probs[1]), 1e-5);
  EXPECT_NEAR(top[2].second, std::log(probs[2]), 1e-5);
  EXPECT_NEAR(Sampler::logprob_of(logits.data(), 4, 0), std::log(probs[0]), 1e-5);
  EXPECT_EQ(Sampler::top_logprobs(logits.data(), 4, 10).size(), 4u);
  EXPECT_TRUE(Sampler::top_logprobs(logits.data(), 4, 0).empty());
  EXPECT_THROW(Sampler::logprob_of(logits.data(), 4, 4), Error);
}

// ---- the SamplingRow path (Backend::sample) --------------------------------------------------------

TEST(SamplerTest, CpuBackendSampleReproducesSamplerTokens) {
  // The same two requests sampled directly and as rows of one batched Backend::sample call on the CPU
  // backend: same seeds, same tokens (penalty lists grow as tokens are accepted), same logprobs.
  SamplingParams p = params_with(0.9f);
  p.top_k = 20;
  p.top_p = 0.9f;
  p.min_p = 0.02f;
  p.repetition_penalty = 1.2f;
  p.presence_penalty = 0.3f;
  p.frequency_penalty = 0.2f;
  p.logprobs = 3;
  SamplingParams q = params_with(0.0f);  // greedy with penalties
  q.repetition_penalty = 1.5f;
  q.frequency_penalty = 1.0f;
  const std::vector<int32_t> prompt = {1, 5, 9, 5};
  Sampler direct_p(p, prompt), rows_p(p, prompt), direct_q(q, prompt), rows_q(q, prompt);
  CpuBackend cpu;
  const int32_t V = 64;
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::set<int32_t> distinct;
  for (int step = 0; step < 300; ++step) {
    Tensor logits = Tensor::empty(DType::F32, {2, V});
    for (int64_t i = 0; i < logits.numel(); ++i) logits.f32()[i] = normal(gen);
    const std::vector<SampledToken> out = cpu.sample(logits, {rows_p.row(), rows_q.row()});
    ASSERT_EQ(out.size(), 2u);
    ASSERT_TRUE(out[0].error.empty() && out[1].error.empty());
    const int32_t a = direct_p.sample(logits.f32(), V), b = direct_q.sample(logits.f32() + V, V);
    ASSERT_EQ(out[0].token, a) << "step " << step;
    ASSERT_EQ(out[1].token, b) << "step " << step;
    EXPECT_EQ(out[0].logprob, Sampler::logprob_of(logits.f32(), V, a));
    EXPECT_EQ(out[0].top, Sampler::top_logprobs(logits.f32(), V, 3));
    EXPECT_TRUE(out[1].top.empty());
    distinct.insert(a);
    direct_p.accept(a), rows_p.accept(a), direct_q.accept(b), rows_q.accept(b);
  }
  EXPECT_GT(distinct.size(), 10u);  // the draws really are random
}

TEST(SamplerTest, CpuBackendSampleReportsBadRowsAlone) {
  CpuBackend cpu;
  Tensor logits = Tensor::empty(DType::F32, {2, 4});
  for (int i = 0; i < 8; ++i) logits.f32()[i] = static_cast<float>(i);
  logits.f32()[5] = NAN;
  Sampler a(params_with(1.0f), {}), b(params_with(1.0f), {});
  const std::vector<SampledToken> out = cpu.sample(logits, {a.row(), b.row()});
  EXPECT_TRUE(out[0].error.empty());
  EXPECT_GE(out[0].token, 0);
  EXPECT_EQ(out[1].token, -1);
  EXPECT_NE(out[1].error.find("nan"), std::string::npos) << out[1].error;
}

// A forced row (prompt scoring) draws nothing: its token is the given one, its logprobs reported there; a
// forced token outside the vocabulary or bad logits fail that row alone.
TEST(SamplerTest, ForcedRowsScoreTheGivenToken) {
  CpuBackend cpu;
  Tensor logits = Tensor::empty(DType::F32, {4, 6});
  const float values[] = {0.5f, 2.0f, -1.0f, 3.0f, 0.0f, 1.0f};
  for (int r = 0; r < 4; ++r) std::copy(values, values + 6, logits.f32() + r * 6);
  logits.f32()[3 * 6 + 2] = NAN;
  std::vector<SamplingRow> rows(4);
  for (int r = 0; r < 4; ++r) {
    rows[r].temperature = r == 0 ? 1.0f : 0.0f;  // no RNG given: a draw would fail
    rows[r].logprobs = 2;
  }
  rows[0].forced_token = 2;  // not the argmax (3)
  rows[1].forced_token = 5;
  rows[2].forced_token = 6;  // outside the vocabulary
  rows[3].forced_token = 0;  // NaN logits
  const std::vector<SampledToken> out = cpu.sample(logits, rows);
  ASSERT_TRUE(out[0].error.empty()) << out[0].error;
  EXPECT_EQ(out[0].token, 2);
  EXPECT_FLOAT_EQ(out[0].logprob, HostSampler::logprob_of(values, 6, 2));
  ASSERT_EQ(out[0].top.size(), 2u);
  EXPECT_EQ(out[0].top[0].first, 3);
  EXPECT_EQ(out[0].top[1].first, 1);
  EXPECT_EQ(out[1].token, 5);
  EXPECT_FLOAT_EQ(out[1].logprob, HostSampler::logprob_of(values, 6, 5));
  EXPECT_NE(out[2].error.find("outside the vocabulary"), std::string::npos) << out[2].error;
  EXPECT_NE(out[3].error.find("nan"), std::string::npos) << out[3].error;
}

}  // namespace
}  // namespace dsinfer
