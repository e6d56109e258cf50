// Helpers of the json_schema tests: compile a schema from text, feed a document, find the first byte refused.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "engine/json_schema.h"
#include "engine/json_schema_recognizer.h"

namespace dsinfer::json_schema_testing {

using ojson = nlohmann::ordered_json;

inline std::shared_ptr<const JsonSchema> compiled(const std::string& schema) {
  return JsonSchema::compile(ojson::parse(schema));
}

// The whole text is a document the schema accepts.
inline bool accepts(const JsonSchema& schema, const std::string& text) {
  JsonSchemaRecognizer r(&schema);
  return r.feed(text) && r.complete();
}

// The first byte refused (text.size() when all are taken).
inline size_t accepted_prefix(const JsonSchema& schema, const std::string& text) {
  JsonSchemaRecognizer r(&schema);
  for (size_t i = 0; i < text.size(); ++i)
    if (!r.feed(static_cast<uint8_t>(text[i]))) return i;
  return text.size();
}

// The compiler's refusal ("" when the schema compiles).
inline std::string compile_error(const std::string& schema) {
  try {
    compiled(schema);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace dsinfer::json_schema_testing
