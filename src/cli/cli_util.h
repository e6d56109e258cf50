// Helpers shared by the CLI subcommands: reading files and JSON lines with clear errors.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dsinfer::cli {

// The whole file; throws dsinfer::Error naming the path when it cannot be read.
std::string read_file(const std::string& path);
// One JSON object per non-empty line; errors name the file and line.
std::vector<nlohmann::json> read_json_lines(const std::string& path);
// A JSON document; errors name the file.
nlohmann::json read_json_file(const std::string& path);

}  // namespace dsinfer::cli
