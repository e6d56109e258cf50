// response_format: type checks, the json_schema envelope (name, schema, strict), and the schema's
// compilation with its declared key order.
#include "server/response_format.h"

#include "core/error.h"
#include "engine/json_schema.h"
#include "server/api_error.h"
#include "server/ordered_body.h"

namespace dsinfer::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

constexpr const char* kParam = "response_format";

bool valid_schema_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

}  // namespace

ResponseFormat parse_response_format(const json& body, OrderedBody& ordered) {
  ResponseFormat out;
  if (!body.contains(kParam) || body[kParam].is_null()) return out;
  const json& format = body[kParam];
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string())
    throw bad_request("'response_format' must be an object with a string 'type'", kParam, "invalid_type");
  const std::string type = format["type"];
  if (type == "text") return out;
  if (type == "json_object") {
    out.json = true;
    return out;
  }
  if (type != "json_schema") {
    throw bad_request(str_cat("'response_format' of type ", format["type"].dump(),
                              " is not supported (\"text\", \"json_object\" and \"json_schema\" are)"),
                      kParam, "unsupported_parameter");
  }
  if (!format.contains("json_schema") || !format["json_schema"].is_object()) {
    throw bad_request("'response_format.json_schema' must be an object with 'name' and 'schema'",
                      "response_format.json_schema", "invalid_type");
  }
  const json& envelope = format["json_schema"];
  if (!envelope.contains("name") || !envelope["name"].is_string() ||
      !valid_schema_name(envelope["name"].get<std::string>())) {
    throw bad_request("'response_format.json_schema.name' must be 1 to 64 letters, digits, '_' or '-'",
                      "response_format.json_schema.name", "invalid_value");
  }
  if (envelope.contains("strict") && !envelope["strict"].is_boolean() && !envelope["strict"].is_null()) {
    throw bad_request("'response_format.json_schema.strict' must be a boolean",
                      "response_format.json_schema.strict", "invalid_type");
  }
  if (!envelope.contains("schema") || !(envelope["schema"].is_object() || envelope["schema"].is_boolean())) {
    throw bad_request("'response_format.json_schema.schema' must be a JSON Schema (an object)",
                      "response_format.json_schema.schema", "invalid_type");
  }
  try {
    out.schema = JsonSchema::compile_cached(
        ordered.part(ordered_json::json_pointer("/response_format/json_schema/schema"), envelope["schema"]));
  } catch (const std::exception& e) {  // (Error; anything else unexpected is still the schema's)
    throw bad_request(str_cat("'response_format.json_schema.schema' cannot be enforced: ", e.what()),
                      "response_format.json_schema.schema", "invalid_value");
  }
  out.json = true;
  return out;
}

}  // namespace dsinfer::server
