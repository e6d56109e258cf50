// A compiled PCRE2 pattern (UTF + UCP, JIT when available) used by the Split pre-tokenizers.
// Patterns are written for Oniguruma (what Hugging Face tokenizers uses); \s and \S are
// rewritten to Oniguruma's Unicode White_Space set before compiling.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dsinfer {

class Regex {
 public:
  // Throws dsinfer::Error when the pattern does not compile. `literal` matches the text as is.
  explicit Regex(std::string_view pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [start, end) byte ranges of all non-overlapping matches, left to right.
  // `subject` must be valid UTF-8. Thread-safe.
  void find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const;

  // True when the pattern matches at the very start of `subject`.
  bool matches_at_start(std::string_view subject) const;

  const std::string& pattern() const { return pattern_; }

 private:
  int match(std::string_view subject, size_t start, unsigned options) const;

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code*
  bool jit_ = false;
};

// Rewrites \s / \S outside character classes, and \s inside them, to Oniguruma's set.
std::string oniguruma_compatible_pattern(std::string_view pattern);

}  // namespace dsinfer
