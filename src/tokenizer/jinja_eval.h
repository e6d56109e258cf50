// Jinja evaluator: renders a parsed template against global variables (statements, scoping, loops,
// macros, expression evaluation). Runtime failures are dsinfer::Error naming the template line.
#pragma once
#include <string>

#include "tokenizer/jinja_ast.h"

namespace dsinfer::jinja {

// `globals` are the render variables; the global functions are added unless overridden.
std::string render(const TemplateAst& ast, Dict globals);

}  // namespace dsinfer::jinja
