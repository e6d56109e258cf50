// Typed reads of config.json fields with errors that name the file part and the field: shared by the
// config parsers of every architecture.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace dsinfer::json_fields {

// The key exists and is not null.
bool present(const nlohmann::json& j, const char* key);
// Required integer (an integral float such as 4.0 is accepted).
int64_t get_int(const nlohmann::json& j, const char* key, const std::string& where = "config.json");
int64_t get_int_or(const nlohmann::json& j, const char* key, int64_t fallback,
                   const std::string& where = "config.json");
double get_num(const nlohmann::json& j, const char* key, const std::string& where = "config.json");
double get_num_or(const nlohmann::json& j, const char* key, double fallback,
                  const std::string& where = "config.json");
bool get_bool_or(const nlohmann::json& j, const char* key, bool fallback,
                 const std::string& where = "config.json");
std::string get_str_or(const nlohmann::json& j, const char* key, const std::string& fallback,
                       const std::string& where = "config.json");
void require_positive(int64_t value, const char* key, const std::string& where = "config.json");

}  // namespace dsinfer::json_fields
