// config.json field readers.
#include "model/json_fields.h"

#include <cmath>

#include "core/error.h"

namespace dsinfer::json_fields {

using nlohmann::json;

bool present(const json& j, const char* key) {
  return j.contains(key) && !j.at(key).is_null();
}

int64_t get_int(const json& j, const char* key, const std::string& where) {
  DSI_CHECK(present(j, key), where, ": required field \"", key, "\" is missing");
  const json& v = j.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    DSI_CHECK(d == std::floor(d), where, ": field \"", key, "\" must be an integer, got ", v.dump());
    return static_cast<int64_t>(d);
  }
  fail(where, ": field \"", key, "\" must be an integer, got ", v.dump());
}

int64_t get_int_or(const json& j, const char* key, int64_t fallback, const std::string& where) {
  return present(j, key) ? get_int(j, key, where) : fallback;
}

double get_num(const json& j, const char* key, const std::string& where) {
  DSI_CHECK(present(j, key), where, ": required field \"", key, "\" is missing");
  const json& v = j.at(key);
  DSI_CHECK(v.is_number(), where, ": field \"", key, "\" must be a number, got ", v.dump());
  return v.get<double>();
}

double get_num_or(const json& j, const char* key, double fallback, const std::string& where) {
  return present(j, key) ? get_num(j, key, where) : fallback;
}

bool get_bool_or(const json& j, const char* key, bool fallback, const std::string& where) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  DSI_CHECK(v.is_boolean(), where, ": field \"", key, "\" must be true or false, got ", v.dump());
  return v.get<bool>();
}

std::string get_str_or(const json& j, const char* key, const std::string& fallback,
                       const std::string& where) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  DSI_CHECK(v.is_string(), where, ": field \"", key, "\" must be a string, got ", v.dump());
  return v.get<std::string>();
}

void require_positive(int64_t value, const char* key, const std::string& where) {
  DSI_CHECK(value > 0, where, ": field \"", key, "\" must be positive, got ", value);
}

}  // namespace dsinfer::json_fields
