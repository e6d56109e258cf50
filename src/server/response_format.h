// OpenAI's `response_format` on chat and text completions: "text", "json_object" (any JSON object) and
// "json_schema" (a value of the given JSON Schema, compiled for constrained decoding), read into the
// request's sampling parameters.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "server/ordered_body.h"

namespace dsinfer {
class JsonSchema;
}

namespace dsinfer::server {

struct ResponseFormat {
  bool json = false;                         // json_object or json_schema
  std::shared_ptr<const JsonSchema> schema;  // json_schema only
};

// Throws ApiError (400) for a malformed response_format, an unknown type, or a schema that cannot be
// enforced (the message names the schema location and keyword). The schema is read from `ordered` (the
// request's text with its key order) so that properties are generated in the order the schema declares them
// (an empty text: the parsed body's order, alphabetical).
ResponseFormat parse_response_format(const nlohmann::json& body, OrderedBody& ordered);

}  // namespace dsinfer::server
