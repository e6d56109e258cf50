// Python methods callable on template values (str.split, dict.items, ...). Names are validated at parse
// time; calling a method the value's type lacks fails at render time, as in Jinja.
#pragma once
#include <string>
#include <string_view>

#include "tokenizer/jinja_value.h"

namespace dsinfer::jinja {

bool is_supported_method(std::string_view name);
Value call_method(const Value& obj, const std::string& name, const CallArgs& args);

}  // namespace dsinfer::jinja
