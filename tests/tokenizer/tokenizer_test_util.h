// Shared helpers for the tokenizer tests: loading the bundled tokenizers once and reading JSON.
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.h"

namespace dsinfer::testing {

inline std::string data_path(const std::string& rel) {
  return std::string(DSINFER_TEST_DATA) + "/" + rel;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

inline const Tokenizer& deepseek_v3() {
  static const Tokenizer tok = Tokenizer::load(data_path("tokenizer/deepseek-v3"));
  return tok;
}

inline const Tokenizer& tiny_code() {
  static const Tokenizer tok = Tokenizer::load(data_path("tokenizer/deepseek-v3-tiny-code"));
  return tok;
}

}  // namespace dsinfer::testing
