// StopChecker implementation: stop-string search across deltas and prefix hold-back.
#include "engine/stop_checker.h"

#include <algorithm>

#include "core/error.h"

namespace dsinfer {
namespace {

bool contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

std::optional<StopMatch> find_stop_string(std::string_view text, std::span<const std::string> stops) {
  std::optional<StopMatch> best;
  for (size_t i = 0; i < stops.size(); ++i) {
    const size_t pos = text.find(stops[i]);
    if (pos == std::string_view::npos) continue;
    if (!best || pos < best->pos || (pos == best->pos && stops[i].size() < stops[best->index].size())) {
      best = StopMatch{pos, i};
    }
  }
  return best;
}

StopChecker::StopChecker(const SamplingParams& params, std::vector<int32_t> eos_token_ids)
    : stops_(params.stop),
      stop_token_ids_(params.stop_token_ids),
      eos_token_ids_(std::move(eos_token_ids)),
      ignore_eos_(params.ignore_eos),
      max_tokens_(params.max_tokens) {
  for (const std::string& stop : stops_) {
    DSI_CHECK(!stop.empty(), "stop checker: stop strings must be non-empty");
    max_stop_length_ = std::max(max_stop_length_, stop.size());
  }
}

StopUpdate StopChecker::end(FinishReason reason, std::string text) {
  reason_ = reason;
  pending_.clear();
  StopUpdate update;
  update.text = std::move(text);
  update.reason = reason;
  return update;
}

StopUpdate StopChecker::on_token(int32_t token, std::string_view delta) {
  DSI_CHECK(!finished(), "stop checker: on_token after the sequence finished (", to_string(reason_), ")");
  ++num_tokens_;

  // A stop/EOS token ends the stream: no stop string can complete, so held text is released.
  if (!ignore_eos_ && contains(eos_token_ids_, token)) {
    StopUpdate update = end(FinishReason::kEos, std::move(pending_));
    update.stop_token = token;
    return update;
  }
  if (contains(stop_token_ids_, token)) {
    StopUpdate update = end(FinishReason::kStop, std::move(pending_));
    update.stop_token = token;
    return update;
  }

  // Everything emitted so far is free of stop strings and of stop-string prefixes reaching its end, so a
  // stop string can only occur inside pending_ (held suffix + this delta).
  pending_.append(delta);
  if (const std::optional<StopMatch> match = find_stop_string(pending_, stops_)) {
    StopUpdate update = end(FinishReason::kStop, pending_.substr(0, match->pos));
    update.stop_string = stops_[match->index];
    return update;
  }
  if (num_tokens_ >= max_tokens_) return end(FinishReason::kLength, std::move(pending_));

  StopUpdate update;
  const size_t emit = pending_.size() - hold_length();
  update.text = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return update;
}

size_t StopChecker::hold_length() const {
  const size_t longest = std::min(pending_.size(), max_stop_length_ == 0 ? 0 : max_stop_length_ - 1);
  const std::string_view text = pending_;
  for (size_t len = longest; len > 0; --len) {
    const std::string_view suffix = text.substr(text.size() - len);
    for (const std::string& stop : stops_) {
      if (stop.size() > len && std::string_view(stop).starts_with(suffix)) return len;
    }
  }
  return 0;
}

std::string StopChecker::finish() {
  if (finished()) return {};
  std::string text = std::move(pending_);
  pending_.clear();
  return text;
}

StopOutcome apply_stop_conditions(const SamplingParams& params, std::vector<int32_t> eos_token_ids,
                                  std::span<const int32_t> tokens, std::span<const std::string> deltas) {
  DSI_CHECK(tokens.size() == deltas.size(), "stop checker: ", tokens.size(), " tokens but ", deltas.size(),
            " text deltas");
  StopChecker checker(params, std::move(eos_token_ids));
  StopOutcome outcome;
  for (size_t i = 0; i < tokens.size() && !checker.finished(); ++i) {
    outcome.text += checker.on_token(tokens[i], deltas[i]).text;
  }
  outcome.text += checker.finish();
  outcome.reason = checker.reason();
  outcome.num_tokens = checker.num_tokens();
  return outcome;
}

}  // namespace dsinfer
