// Jinja filters ({{ x | name(args) }}) supported by the chat-template engine, looked up by name at parse
// time.
#pragma once
#include <string_view>

#include "tokenizer/jinja_ast.h"

namespace dsinfer::jinja {

// The filter function for `name`, or nullptr when the filter is not supported.
FilterFn find_filter(std::string_view name);

}  // namespace dsinfer::jinja
