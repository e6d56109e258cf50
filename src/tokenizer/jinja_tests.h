// Jinja tests ({{ x is name(args) }}) supported by the chat-template engine, looked up by name at parse time.
#pragma once
#include <string_view>

#include "tokenizer/jinja_ast.h"

namespace dsinfer::jinja {

// The test function for `name`, or nullptr when the test is not supported.
TestFn find_test(std::string_view name);

}  // namespace dsinfer::jinja
