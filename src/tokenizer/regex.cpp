// PCRE2 wrapper: compiling with JIT (falling back to the interpreter), per-thread match state.
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace dsinfer {
namespace {

constexpr std::string_view kSpaceItems =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

// Match data, match context and JIT stack for the calling thread.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    DSI_CHECK(data && context, "regex: out of memory creating PCRE2 match state");
    pcre2_set_match_limit(context, 0xFFFFFFFFu);
    pcre2_set_depth_limit(context, 0xFFFFFFFFu);
    if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

std::string error_text(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string oniguruma_compatible_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        if (in_class) {
          out += kSpaceItems;
        } else {
          out += '[';
          out += kSpaceItems;
          out += ']';
        }
      } else if (n == 'S' && !in_class) {
        out += "[^";
        out += kSpaceItems;
        out += ']';
      } else {
        out += c;
        out += n;
      }
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      // A ']' right after '[' or '[^' is a literal.
      if (i < p.size() && p[i] == '^') out += p[i++];
      if (i < p.size() && p[i] == ']') out += p[i++];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const size_t close = p.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(p.substr(i, close + 2 - i));
        i = close + 2;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  return out;
}

Regex::Regex(std::string_view pattern, bool literal) : pattern_(pattern) {
  const std::string compiled = literal ? std::string(pattern) : oniguruma_compatible_pattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_LITERAL does not combine with PCRE2_UCP (which a literal does not need).
  const uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(), options,
                                   &error, &offset, nullptr);
  if (!code)
    fail("tokenizer: cannot compile regex '", pattern, "' at offset ", offset, ": ", error_text(error));
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

int Regex::match(std::string_view subject, size_t start, unsigned options) const {
  ThreadMatchState& st = thread_state();
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = PCRE2_ERROR_JIT_BADOPTION;
  if (jit_ && st.jit_stack)
    rc = pcre2_jit_match(code, s, subject.size(), start, options, st.data, st.context);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION) {
    rc = pcre2_match(code, s, subject.size(), start, options | PCRE2_NO_UTF_CHECK, st.data, st.context);
  }
  if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
    fail("tokenizer: regex '", pattern_, "' failed on a ", subject.size(), "-byte piece: ", error_text(rc));
  }
  return rc;
}

void Regex::find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const {
  size_t start = 0;
  while (start <= subject.size()) {
    if (match(subject, start, 0) == PCRE2_ERROR_NOMATCH) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(thread_state().data);
    const size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b) {
      start = e;
    } else {
      if (e >= subject.size()) break;
      start = e + utf8::seq_len(static_cast<unsigned char>(subject[e]));
    }
  }
}

bool Regex::matches_at_start(std::string_view subject) const {
  return match(subject, 0, PCRE2_ANCHORED) >= 0;
}

}  // namespace dsinfer
