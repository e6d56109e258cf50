// The circuit_breaker YAML exactly as the resilience issue gives it (tests/data/resilience), shared by the
// resilience tests.
#pragma once
#include <fstream>
#include <sstream>
#include <string>

inline std::string issue_circuit_breaker_yaml() {
  std::ifstream in(std::string(DSINFER_TEST_DATA) + "/resilience/issue_circuit_breaker.yaml");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
