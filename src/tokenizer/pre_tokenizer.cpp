// Pre-tokenizer parsing and execution, following Hugging Face tokenizers' split semantics.
#include "tokenizer/pre_tokenizer.h"

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace dsinfer {
namespace {

// The pattern Hugging Face's ByteLevel pre-tokenizer uses when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

SplitBehavior parse_behavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  fail("tokenizer: unsupported Split behavior '", name, "'");
}

bool get_bool(const nlohmann::json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  DSI_CHECK(it->is_boolean(), "tokenizer: pre_tokenizer field '", key, "' must be a boolean");
  return it->get<bool>();
}

struct Part {
  size_t begin, end;
  bool is_match;
};

}  // namespace

void split_piece(std::string_view piece, const Regex& regex, SplitBehavior behavior, bool invert,
                 std::vector<std::string_view>& out) {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  thread_local std::vector<Part> parts;
  matches.clear();
  parts.clear();
  regex.find_all(piece, matches);
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) parts.push_back({prev, b, invert});
    parts.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != piece.size()) parts.push_back({prev, piece.size(), invert});

  auto emit = [&](size_t b, size_t e) {
    if (e > b) out.push_back(piece.substr(b, e - b));
  };
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Part& p : parts)
        if (!p.is_match) emit(p.begin, p.end);
      return;
    case SplitBehavior::kIsolated:
      for (const Part& p : parts) emit(p.begin, p.end);
      return;
    default:
      break;
  }
  // The merging behaviors build merged ranges first (empty ranges still take part, as in HF).
  thread_local std::vector<std::pair<size_t, size_t>> merged;
  merged.clear();
  bool previous_match = false;
  if (behavior == SplitBehavior::kMergedWithNext) {
    for (size_t k = parts.size(); k-- > 0;) {
      const Part& p = parts[k];
      if (p.is_match && !previous_match && !merged.empty()) {
        merged.back().first = p.begin;
      } else {
        merged.emplace_back(p.begin, p.end);
      }
      previous_match = p.is_match;
    }
    for (size_t k = merged.size(); k-- > 0;) emit(merged[k].first, merged[k].second);
    return;
  }
  for (const Part& p : parts) {
    const bool join = behavior == SplitBehavior::kMergedWithPrevious ? (p.is_match && !previous_match)
                                                                     : (p.is_match == previous_match);
    if (join && !merged.empty()) {
      merged.back().second = p.end;
    } else {
      merged.emplace_back(p.begin, p.end);
    }
    previous_match = p.is_match;
  }
  for (auto [b, e] : merged) emit(b, e);
}

void PreTokenizer::parse(const nlohmann::json& j, std::vector<Step>& steps) {
  if (j.is_null()) return;
  DSI_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(),
            "tokenizer: pre_tokenizer must be an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    DSI_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(),
              "tokenizer: Sequence pre_tokenizer needs a 'pretokenizers' array");
    for (const auto& child : j["pretokenizers"]) parse(child, steps);
  } else if (type == "Split") {
    Step step;
    const auto& pattern = j.at("pattern");
    if (pattern.contains("Regex")) {
      step.regex = std::make_shared<Regex>(pattern["Regex"].get<std::string>());
    } else if (pattern.contains("String")) {
      step.regex = std::make_shared<Regex>(pattern["String"].get<std::string>(), /*literal=*/true);
    } else {
      fail("tokenizer: Split pattern must have 'Regex' or 'String'");
    }
    step.behavior = parse_behavior(j.at("behavior").get<std::string>());
    step.invert = get_bool(j, "invert", false);
    steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    Step step;
    step.kind = Step::Kind::kByteLevel;
    step.add_prefix_space = get_bool(j, "add_prefix_space", true);
    step.use_regex = get_bool(j, "use_regex", true);
    if (step.use_regex) step.regex = std::make_shared<Regex>(kGpt2Pattern);
    steps.push_back(std::move(step));
  } else if (type == "Digits") {
    Step step;
    const bool individual = get_bool(j, "individual_digits", false);
    step.regex = std::make_shared<Regex>("[0-9]");
    step.behavior = individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
    steps.push_back(std::move(step));
  } else {
    fail("tokenizer: unsupported pre_tokenizer type '", type, "'");
  }
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j) {
  PreTokenizer p;
  parse(j, p.steps_);
  return p;
}

bool PreTokenizer::ends_with_byte_level() const {
  return !steps_.empty() && steps_.back().kind == Step::Kind::kByteLevel;
}

void PreTokenizer::run(std::string_view text, PreTokenized& out) const {
  out.pieces.clear();
  out.arena.clear();
  out.byte_mapped = false;
  if (!text.empty()) out.pieces.push_back(text);
  thread_local std::vector<std::string_view> next;
  for (const Step& step : steps_) {
    if (out.byte_mapped) {
      // A step after ByteLevel sees the mapped characters.
      for (auto& piece : out.pieces) {
        std::string& mapped = out.arena.emplace_back();
        byte_level::map_bytes(piece, mapped);
        piece = mapped;
      }
      out.byte_mapped = false;
    }
    next.clear();
    if (step.kind == Step::Kind::kSplit) {
      for (std::string_view piece : out.pieces)
        split_piece(piece, *step.regex, step.behavior, step.invert, next);
    } else {
      for (std::string_view piece : out.pieces) {
        if (step.add_prefix_space && piece.front() != ' ') {
          std::string& prefixed = out.arena.emplace_back();
          prefixed.reserve(piece.size() + 1);
          prefixed += ' ';
          prefixed += piece;
          piece = prefixed;
        }
        if (step.use_regex) {
          split_piece(piece, *step.regex, SplitBehavior::kIsolated, false, next);
        } else {
          next.push_back(piece);
        }
      }
      out.byte_mapped = true;
    }
    out.pieces.swap(next);
  }
}

}  // namespace dsinfer
