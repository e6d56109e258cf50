// A scan of raw JSON text for its nesting depth, run before parsing: nlohmann::json copies (and compares,
// dumps) nested values recursively, so a body of a million nested arrays would overflow the stack long after
// it was parsed. The scan needs no parse and stops at the first bracket past the limit.
#pragma once
#include <cstddef>
#include <string_view>

namespace dsinfer::server {

// The deepest JSON nesting a request body may have ({"messages": [{"content": [{...}]}]} is 4 deep).
constexpr size_t kMaxJsonDepth = 64;

// True when `text` opens more than `limit` arrays/objects inside one another. Brackets inside strings
// (escapes included) do not count; malformed text is scanned the same way (the parser rejects it later).
bool json_deeper_than(std::string_view text, size_t limit);

}  // namespace dsinfer::server
