// Global functions available to chat templates: range, namespace, dict, raise_exception, strftime_now
// (the functions transformers' Jinja environment provides).
#pragma once
#include "core/error.h"
#include "tokenizer/jinja_value.h"

namespace dsinfer::jinja {

// Error thrown by raise_exception(): carries the template's message unchanged.
class TemplateRaisedError : public Error {
 public:
  using Error::Error;
};

// Adds the global functions to `globals` (existing entries are kept, so callers can override them).
void add_global_functions(Dict& globals);

}  // namespace dsinfer::jinja
