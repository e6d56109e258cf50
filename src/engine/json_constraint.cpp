// TokenTrie and JsonConstraint: allowed-token masks for JSON-constrained decoding (see the header).
#include "engine/json_constraint.h"

#include <algorithm>
#include <cctype>
#include <unordered_set>

#include "core/error.h"

namespace dsinfer {

TokenTrie::TokenTrie(const Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  const std::vector<int32_t> added = tok.added_token_ids();
  const std::unordered_set<int32_t> skip(added.begin(), added.end());
  std::vector<std::pair<std::string, int32_t>> tokens;
  tokens.reserve(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    if (!tok.has_id(id) || skip.count(id)) continue;
    const std::string& bytes = tok.token_bytes(id);
    if (!bytes.empty()) tokens.emplace_back(bytes, id);
  }
  // The answers for states inside strings, worked out once.
  JsonRecognizer in_string;
  DSI_CHECK(in_string.feed(std::string_view("{\"")) && in_string.in_plain_string(), "json: no string state");
  string_safe_.assign(static_cast<size_t>(n + 31) / 32, 0u);
  safe_chars_.assign(static_cast<size_t>(n), kNotSafe);
  for (const auto& [bytes, id] : tokens) {
    if (bytes.find_first_of("\"\\") != std::string::npos) {
      string_special_.emplace_back(id, bytes);
      continue;
    }
    JsonRecognizer next = in_string;
    if (!next.feed(std::string_view(bytes))) continue;
    string_safe_[id / 32] |= 1u << (id % 32);
    // Characters: bytes that are not UTF-8 continuations (a token may end inside a character).
    int32_t chars = 0;
    for (char c : bytes) chars += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    max_safe_chars_ = std::max(max_safe_chars_, chars);
    // (Longer ones stay kNotSafe: left out near a bound, which only costs the model that token there.)
    if (chars < kNotSafe) safe_chars_[static_cast<size_t>(id)] = static_cast<uint8_t>(chars);
  }
  safe_upto_.assign(static_cast<size_t>(std::min(max_safe_chars_, kUptoSets)),
                    std::vector<uint32_t>(string_safe_.size(), 0u));
  for (size_t id = 0; id < safe_chars_.size(); ++id)
    for (int32_t c = safe_chars_[id]; c < static_cast<int32_t>(safe_upto_.size()); ++c)
      safe_upto_[static_cast<size_t>(c)][id / 32] |= 1u << (id % 32);
  std::sort(tokens.begin(), tokens.end());
  next_token_.assign(static_cast<size_t>(n), -1);
  nodes_.reserve(tokens.size() * 2);
  build(tokens, 0, tokens.size(), 0);
}

// The node for tokens[lo, hi), which share their first `depth` bytes; its edges are contiguous.
uint32_t TokenTrie::build(std::vector<std::pair<std::string, int32_t>>& tokens, size_t lo, size_t hi,
                          size_t depth) {
  const uint32_t node = static_cast<uint32_t>(nodes_.size());
  nodes_.emplace_back();
  // Sorted: the tokens that end at this depth come first.
  while (lo < hi && tokens[lo].first.size() == depth) {
    next_token_[tokens[lo].second] = nodes_[node].first_token;
    nodes_[node].first_token = tokens[lo].second;
    ++lo;
  }
  // One edge per distinct next byte, allocated together before the children are built.
  std::vector<std::pair<size_t, size_t>> groups;
  for (size_t i = lo; i < hi;) {
    size_t j = i;
    while (j < hi && tokens[j].first[depth] == tokens[i].first[depth]) ++j;
    groups.emplace_back(i, j);
    i = j;
  }
  nodes_[node].first_edge = static_cast<uint32_t>(edges_.size());
  nodes_[node].num_edges = static_cast<uint32_t>(groups.size());
  for (const auto& [i, j] : groups) edges_.push_back({static_cast<uint8_t>(tokens[i].first[depth]), 0});
  for (size_t g = 0; g < groups.size(); ++g) {
    const uint32_t child = build(tokens, groups[g].first, groups[g].second, depth + 1);
    edges_[nodes_[node].first_edge + g].child = child;
  }
  return node;
}

template <class Recognizer>
void TokenTrie::visit(uint32_t node, const Recognizer& state, std::span<uint32_t> mask) const {
  const Node& n = nodes_[node];
  for (uint32_t e = n.first_edge; e < n.first_edge + n.num_edges; ++e) {
    Recognizer next = state;
    if (!next.feed_or_spoil(edges_[e].byte)) continue;
    const uint32_t child = edges_[e].child;
    for (int32_t t = nodes_[child].first_token; t >= 0; t = next_token_[t]) {
      if (static_cast<size_t>(t) / 32 < mask.size()) mask[t / 32] |= 1u << (t % 32);
    }
    visit(child, next, mask);
  }
}

template <class Recognizer>
void TokenTrie::allowed(const Recognizer& state, std::span<uint32_t> mask) const {
  const int32_t budget = state.string_budget();
  if (budget < 0) {
    visit(0, state, mask);
    return;
  }
  const std::vector<uint32_t>* set = budget >= max_safe_chars_                          ? &string_safe_
                                     : budget < static_cast<int32_t>(safe_upto_.size()) ? &safe_upto_[budget]
                                                                                        : nullptr;
  if (set) {
    for (size_t w = 0; w < set->size() && w < mask.size(); ++w) mask[w] |= (*set)[w];
  } else {
    for (size_t id = 0; id < safe_chars_.size() && id / 32 < mask.size(); ++id)
      if (safe_chars_[id] <= budget) mask[id / 32] |= 1u << (id % 32);
  }
  for (const auto& [id, bytes] : string_special_) {
    Recognizer next = state;
    if (static_cast<size_t>(id) / 32 < mask.size() && next.feed(std::string_view(bytes)))
      mask[id / 32] |= 1u << (id % 32);
  }
}

template void TokenTrie::allowed(const JsonRecognizer&, std::span<uint32_t>) const;
template void TokenTrie::allowed(const JsonSchemaRecognizer&, std::span<uint32_t>) const;

template <class Recognizer>
BasicJsonMaskCache<Recognizer>::BasicJsonMaskCache(std::shared_ptr<const TokenTrie> trie, int32_t vocab)
    : trie_(std::move(trie)), vocab_(vocab) {
  DSI_CHECK(trie_ != nullptr && vocab_ > 0, "json constraint: no vocabulary");
}

template <class Recognizer>
std::span<const uint32_t> BasicJsonMaskCache<Recognizer>::allowed(const Recognizer& state) {
  for (size_t i = 0; i < cache_.size(); ++i) {
    if (cache_[i].state == state) {
      std::rotate(cache_.begin() + static_cast<std::ptrdiff_t>(i),
                  cache_.begin() + static_cast<std::ptrdiff_t>(i) + 1, cache_.end());
      return cache_.back().mask;
    }
  }
  if (cache_.size() == kEntries) cache_.erase(cache_.begin());
  Cached entry{state, std::vector<uint32_t>(static_cast<size_t>(vocab_ + 31) / 32, 0u)};
  trie_->allowed(state, entry.mask);
  cache_.push_back(std::move(entry));
  return cache_.back().mask;
}

template class BasicJsonMaskCache<JsonRecognizer>;
template class BasicJsonMaskCache<JsonSchemaRecognizer>;

JsonConstraint::JsonConstraint(std::shared_ptr<const TokenTrie> trie, Tokenizer tokenizer, int32_t vocab,
                               std::vector<int32_t> eos_ids, std::shared_ptr<const JsonSchema> schema)
    : schema_(std::move(schema)),
      walk_(schema_ ? decltype(walk_)(
                          Walk<JsonSchemaRecognizer>{{trie, vocab}, JsonSchemaRecognizer(schema_.get())})
                    : decltype(walk_)(Walk<JsonRecognizer>{{trie, vocab}, JsonRecognizer()})),
      tokenizer_(std::move(tokenizer)),
      eos_ids_(std::move(eos_ids)) {
  eos_mask_.assign(static_cast<size_t>(vocab + 31) / 32, 0u);
  for (int32_t id : eos_ids_)
    if (id >= 0 && id < vocab) eos_mask_[id / 32] |= 1u << (id % 32);
}

bool JsonConstraint::complete() const {
  return std::visit([](const auto& w) { return w.state.complete(); }, walk_);
}

std::span<const uint32_t> JsonConstraint::allowed() {
  return std::visit(
      [&](auto& w) -> std::span<const uint32_t> {
        const std::span<const uint32_t> more = w.masks.allowed(w.state);
        if (!w.state.complete()) return more;
        // Complete: the end, or (a number, a literal that a longer one extends) more of the value.
        eos_or_more_ = eos_mask_;
        for (size_t i = 0; i < more.size() && i < eos_or_more_.size(); ++i) eos_or_more_[i] |= more[i];
        return eos_or_more_;
      },
      walk_);
}

void JsonConstraint::advance(int32_t token) {
  if (std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) {
    DSI_CHECK(complete(), "json constraint: an end-of-sequence token before the JSON value is complete");
    return;
  }
  DSI_CHECK(tokenizer_.has_id(token), "json constraint: token ", token, " is outside the vocabulary");
  std::visit(
      [&](auto& w) {
        auto next = w.state;
        DSI_CHECK(next.feed(tokenizer_.token_bytes(token)), "json constraint: token ", token,
                  " does not continue the JSON value");
        w.state = next;
      },
      walk_);
}

ToolArgumentsConstraint::ToolArgumentsConstraint(std::shared_ptr<const TokenTrie> trie, Tokenizer tokenizer,
                                                 int32_t vocab, Start start, Schemas schemas,
                                                 std::string function, bool bare)
    : masks_(trie, vocab),
      schema_masks_(std::move(trie), vocab),
      tokenizer_(std::move(tokenizer)),
      schemas_(std::move(schemas)),
      state_(start == Start::kFree     ? State::kFree
             : start == Start::kInCall ? State::kInCall
                                       : State::kArguments),
      bare_(bare),
      json_(true, true) {
  if (state_ == State::kArguments) open_arguments(function);
}

// A call's arguments begin: held to its function's schema when there is one, else to any JSON object.
void ToolArgumentsConstraint::open_arguments(std::string_view function) {
  json_ = JsonRecognizer(true, true);
  schema_json_.reset();
  for (const auto& [name, schema] : schemas_)
    if (name == function && schema) schema_json_.emplace(schema.get(), /*free_after=*/true);
}

bool ToolArgumentsConstraint::feed_arguments(uint8_t byte) {
  return schema_json_ ? schema_json_->feed(byte) : json_.feed(byte);
}

bool ToolArgumentsConstraint::arguments_complete() const {
  return schema_json_ ? schema_json_->complete() : json_.complete();
}

std::span<const uint32_t> ToolArgumentsConstraint::allowed() {
  if (state_ != State::kArguments) return {};
  return schema_json_ ? schema_masks_.allowed(*schema_json_) : masks_.allowed(json_);
}

void ToolArgumentsConstraint::advance(int32_t token) {
  if (!tokenizer_.has_id(token)) return;
  take(tokenizer_.token_bytes(token));
}

namespace {

// The function name in a call's text before its fence (V3: after the separator, or all of it when the prompt
// wrote the separator) or before its separator (V3.1: all of it), trimmed.
std::string_view call_function(std::string_view text) {
  const size_t sep = text.rfind(ToolArgumentsConstraint::kSep);
  if (sep != std::string_view::npos) text.remove_prefix(sep + ToolArgumentsConstraint::kSep.size());
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

}  // namespace

// The state machine over the answer's bytes; a token may hold a marker's end and what follows it.
void ToolArgumentsConstraint::take(std::string_view bytes) {
  while (!bytes.empty()) {
    if (state_ == State::kArguments) {
      size_t used = 0;
      while (used < bytes.size() && !arguments_complete()) {
        if (!feed_arguments(static_cast<uint8_t>(bytes[used]))) break;
        ++used;
      }
      if (!arguments_complete() && used == bytes.size()) return;  // the arguments go on
      // Complete (or broken, which frees the text rather than failing the request): free text follows.
      state_ = State::kFree;
      tail_.clear();
      json_ = JsonRecognizer(true, true);
      schema_json_.reset();
      bytes.remove_prefix(used);
      continue;
    }
    // Free text or inside a call: look for the next marker in the text's tail.
    tail_ += bytes;
    bytes = {};
    const std::string_view marker = state_ == State::kFree ? kCallBegin : bare_ ? kSep : kFence;
    size_t at = tail_.find(marker);
    if (state_ == State::kInCall) {
      const size_t end = tail_.find(kCallEnd);
      if (end != std::string::npos && (at == std::string::npos || end < at)) {  // a call without a fence
        state_ = State::kFree;
        const std::string rest = tail_.substr(end + kCallEnd.size());
        tail_.clear();
        take(rest);
        return;
      }
    }
    if (at == std::string::npos) {
      // Keep what may start a marker; in a call, its text (the function name) up to a bound.
      const size_t keep =
          state_ == State::kInCall ? kMaxCallText : std::max(kCallBegin.size(), kCallEnd.size());
      if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
      return;
    }
    const std::string rest = tail_.substr(at + marker.size());
    if (state_ == State::kFree) {
      state_ = State::kInCall;
    } else {
      state_ = State::kArguments;
      open_arguments(call_function(std::string_view(tail_).substr(0, at)));
    }
    tail_.clear();
    take(rest);
    return;
  }
}

}  // namespace dsinfer
