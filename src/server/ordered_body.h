// A part of the request body with the key order of its text (nlohmann::json, which parsed the body, keeps
// keys sorted): JSON Schemas whose properties are generated in the order they are declared.
#pragma once
#include <nlohmann/json.hpp>
#include <string_view>

namespace dsinfer::server {

// The value at `pointer` in raw_body, read again in order; `parsed` (the same value from the parsed body) in
// sorted order when raw_body is empty or does not hold it.
inline nlohmann::ordered_json ordered_part(std::string_view raw_body,
                                           const nlohmann::ordered_json::json_pointer& pointer,
                                           const nlohmann::json& parsed) {
  if (!raw_body.empty()) {
    try {
      return nlohmann::ordered_json::parse(raw_body).at(pointer);
    } catch (const std::exception&) {
      // Parsed once already; fall back to the sorted copy below.
    }
  }
  return nlohmann::ordered_json::parse(parsed.dump());
}

}  // namespace dsinfer::server
