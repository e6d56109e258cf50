// Python str semantics on UTF-8 strings for the Jinja engine: code points, case mapping, strip/split,
// replace and repr().
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsinfer::jinja {

// Splits UTF-8 text into its code points (each returned as its UTF-8 bytes).
std::vector<std::string> utf8_chars(std::string_view s);
size_t utf8_length(std::string_view s);
std::vector<uint32_t> utf8_decode(std::string_view s);
void utf8_append(std::string& out, uint32_t cp);

bool is_py_space(uint32_t cp);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);
// str.strip/lstrip/rstrip; chars = nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split/rsplit; sep = nullopt splits on whitespace runs. maxsplit < 0: no limit.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
// str.replace; count < 0: all occurrences.
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// Python repr() of a str: quotes chosen like CPython, escapes for control characters.
std::string py_str_repr(std::string_view s);

}  // namespace dsinfer::jinja
