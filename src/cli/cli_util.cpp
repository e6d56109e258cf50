// File and JSON-lines reading for the CLI.
#include "cli/cli_util.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace dsinfer::cli {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DSI_CHECK(in.good(), "cannot open ", path, ": no such file or not readable");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::istringstream in(read_file(path));
  std::vector<nlohmann::json> out;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::parse_error& e) {
      fail(path, ":", number, ": invalid JSON: ", e.what());
    }
    DSI_CHECK(out.back().is_object(), path, ":", number, ": each line must be a JSON object");
  }
  return out;
}

nlohmann::json read_json_file(const std::string& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
}

}  // namespace dsinfer::cli
