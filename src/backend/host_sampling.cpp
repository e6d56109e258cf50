// HostSampler: penalties, temperature, top-k / top-p / min-p filtering and the seeded draw on the host.
#include "backend/host_sampling.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace dsinfer {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Max of logits[0, vocab) and log(sum(exp(logit - max))); rejects NaN and +inf.
std::pair<float, double> max_and_log_sum_exp(const float* logits, int32_t vocab) {
  DSI_CHECK(vocab > 0, "sampler: vocab must be > 0, got ", vocab);
  float max = kNegInf;
  for (int32_t i = 0; i < vocab; ++i) {
    DSI_CHECK(!std::isnan(logits[i]) && logits[i] != -kNegInf, "sampler: logit of token ", i, " is ",
              logits[i]);
    max = std::max(max, logits[i]);
  }
  DSI_CHECK(max != kNegInf, "sampler: every logit is -inf");
  double sum = 0.0;
  for (int32_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  return {max, std::log(sum)};
}

}  // namespace

void HostSampler::apply_penalties(float* logits, int32_t vocab, const SamplingRow& row) {
  const float rep = row.repetition_penalty;
  if (rep != 1.0f) {
    for (int32_t id : row.seen_tokens) {
      DSI_CHECK(id >= 0 && id < vocab, "sampler: token id ", id, " is outside the vocabulary of ", vocab);
      float& logit = logits[id];
      logit = logit > 0.0f ? logit / rep : logit * rep;
    }
  }
  const float presence = row.presence_penalty;
  const float frequency = row.frequency_penalty;
  if (presence != 0.0f || frequency != 0.0f) {
    DSI_CHECK(row.generated_tokens.size() == row.generated_counts.size(),
              "sampler: ", row.generated_tokens.size(), " generated tokens but ", row.generated_counts.size(),
              " counts");
    for (size_t i = 0; i < row.generated_tokens.size(); ++i) {
      const int32_t id = row.generated_tokens[i];
      DSI_CHECK(id >= 0 && id < vocab, "sampler: token id ", id, " is outside the vocabulary of ", vocab);
      logits[id] -= presence + frequency * static_cast<float>(row.generated_counts[i]);
    }
  }
  DSI_CHECK(row.bias_ids.size() == row.bias_values.size(), "sampler: ", row.bias_ids.size(),
            " biased tokens but ", row.bias_values.size(), " biases");
  for (size_t i = 0; i < row.bias_ids.size(); ++i) {
    const int32_t id = row.bias_ids[i];
    DSI_CHECK(id >= 0 && id < vocab, "sampler: token id ", id, " is outside the vocabulary of ", vocab);
    logits[id] += row.bias_values[i];
  }
  if (!row.allowed.empty()) {
    DSI_CHECK(row.allowed.size() * 32 >= static_cast<size_t>(vocab), "sampler: an allowed-token mask of ",
              row.allowed.size(), " words for a vocabulary of ", vocab);
    for (int32_t i = 0; i < vocab; ++i)
      if (!((row.allowed[i / 32] >> (i % 32)) & 1u)) logits[i] = kNegInf;
  }
}

int32_t HostSampler::sample(const float* logits, int32_t vocab, const SamplingRow& row,
                            std::mt19937_64& rng) {
  DSI_CHECK(vocab > 0, "sampler: vocab must be > 0, got ", vocab);
  work_.assign(logits, logits + vocab);
  apply_penalties(work_.data(), vocab, row);

  // Argmax with the lowest id on ties; this is also the reference point for temperature scaling.
  int32_t best = -1;
  float best_logit = kNegInf;
  for (int32_t i = 0; i < vocab; ++i) {
    const float v = work_[i];
    DSI_CHECK(!std::isnan(v) && v != -kNegInf, "sampler: logit of token ", i, " is ", v);
    if (v > best_logit) {
      best_logit = v;
      best = i;
    }
  }
  DSI_CHECK(best >= 0, "sampler: every logit is -inf");
  if (row.temperature == 0.0f) return best;

  // Unnormalised probabilities exp((logit - max) / T) lie in [0, 1] (the argmax has 1), so even a tiny
  // temperature cannot overflow. Each is computed once; zero weights can never be drawn and are dropped.
  const float temperature = row.temperature;
  candidates_.clear();
  candidates_.reserve(vocab);
  for (int32_t i = 0; i < vocab; ++i) {
    const float weight = std::exp((work_[i] - best_logit) / temperature);
    if (weight > 0.0f) candidates_.push_back({i, weight});
  }

  const int32_t top_k = row.top_k;
  if (top_k > 0 && static_cast<size_t>(top_k) < candidates_.size()) {
    std::nth_element(candidates_.begin(), candidates_.begin() + top_k, candidates_.end(), better);
    candidates_.resize(top_k);
  }
  if (row.top_p < 1.0f) keep_top_p(row.top_p);
  if (row.min_p > 0.0f) {
    // p >= min_p * p_max  <=>  weight >= min_p, since the argmax (always kept) has weight 1.
    const float min_p = row.min_p;
    std::erase_if(candidates_, [&](const Candidate& c) { return c.weight < min_p; });
  }
  return draw(rng);
}

SampledToken HostSampler::sample_row(const float* logits, int32_t vocab, const SamplingRow& row) {
  SampledToken out;
  try {
    if (row.forced_token >= 0) {
      DSI_CHECK(row.forced_token < vocab, "sampler: forced token ", row.forced_token,
                " is outside the vocabulary of ", vocab);
      max_and_log_sum_exp(logits, vocab);  // the checks a draw makes: NaN, +inf, every logit -inf
      out.token = row.forced_token;
    } else {
      DSI_CHECK(row.host_rng != nullptr, "sampler: the row has no host RNG");
      out.token = sample(logits, vocab, row, *row.host_rng);
    }
    if (row.logprobs > 0) {
      out.logprob = logprob_of(logits, vocab, out.token);
      out.top = top_logprobs(logits, vocab, row.logprobs);
    }
  } catch (const std::exception& e) {
    out = SampledToken{};
    out.error = e.what();
  }
  return out;
}

void HostSampler::keep_top_p(float top_p) {
  const auto mass = [&](size_t begin, size_t end) {
    double sum = 0.0;
    for (size_t i = begin; i < end; ++i) sum += candidates_[i].weight;
    return sum;
  };
  const double target = static_cast<double>(top_p) * mass(0, candidates_.size());
  // Cheap exact pre-filter: the tokens with weight >= cut are a best-first prefix, so when they already
  // hold the target mass the nucleus lies among them. Peaked distributions shrink to a few hundred tokens.
  for (const float cut : {1e-3f, 1e-6f}) {
    double head = 0.0;
    for (const Candidate& c : candidates_) head += c.weight >= cut ? c.weight : 0.0f;
    if (head >= target) {
      std::erase_if(candidates_, [cut](const Candidate& c) { return c.weight < cut; });
      break;
    }
  }
  // Bisect on the nucleus size with nth_element (expected O(n) overall, no full sort). Invariant:
  // [0, lo) holds the lo best candidates with total mass `before` < target, everything from hi on ranks
  // below [0, hi), and the nucleus size is in (lo, hi].
  size_t lo = 0, hi = candidates_.size();
  double before = 0.0;
  while (hi - lo > 64) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(candidates_.begin() + lo, candidates_.begin() + mid, candidates_.begin() + hi, better);
    const double upper = mass(lo, mid);
    if (before + upper >= target) {
      hi = mid;
    } else {
      before += upper;
      lo = mid;
    }
  }
  std::sort(candidates_.begin() + lo, candidates_.begin() + hi, better);
  double cumulative = before;
  for (size_t i = lo; i < hi; ++i) {
    cumulative += candidates_[i].weight;
    if (cumulative >= target) {
      hi = i + 1;  // at least one token is always kept
      break;
    }
  }
  candidates_.resize(hi);  // if rounding kept the target out of reach, everything up to hi stays
}

int32_t HostSampler::draw(std::mt19937_64& rng) const {
  double total = 0.0;
  for (const Candidate& c : candidates_) total += c.weight;
  // 53 random bits -> uniform double in [0, 1), independent of the standard library's distributions.
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  const double r = u * total;
  double cumulative = 0.0;
  for (const Candidate& c : candidates_) {
    cumulative += c.weight;
    if (r < cumulative) return c.id;
  }
  return candidates_.front().id;  // unreachable up to rounding; the best candidate is a safe answer
}

std::vector<std::pair<int32_t, float>> HostSampler::top_logprobs(const float* logits, int32_t vocab,
                                                                 int32_t n) {
  const auto [max, log_sum] = max_and_log_sum_exp(logits, vocab);
  const int32_t count = std::clamp(n, 0, vocab);
  if (count == 0) return {};
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<std::pair<int32_t, float>> out;
  out.reserve(count);
  for (int32_t i = 0; i < count; ++i) {
    const int32_t id = ids[i];
    out.emplace_back(id, static_cast<float>(static_cast<double>(logits[id]) - max - log_sum));
  }
  return out;
}

float HostSampler::logprob_of(const float* logits, int32_t vocab, int32_t token) {
  DSI_CHECK(token >= 0 && token < vocab, "sampler: token id ", token, " is outside [0, ", vocab, ")");
  const auto [max, log_sum] = max_and_log_sum_exp(logits, vocab);
  return static_cast<float>(static_cast<double>(logits[token]) - max - log_sum);
}

}  // namespace dsinfer
