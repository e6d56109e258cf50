// Jinja parser: turns lexer tokens into the syntax tree. Unsupported statements, filters, tests, method
// names and unknown functions are reported here, at load time, with their line.
#pragma once
#include <string_view>

#include "tokenizer/jinja_ast.h"

namespace dsinfer::jinja {

// Names callable without being defined by the template (provided by the evaluator).
bool is_global_function(std::string_view name);

TemplateAst parse_template(std::string_view source);

}  // namespace dsinfer::jinja
