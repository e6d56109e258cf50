// Server-sent events framing for OpenAI streams: "data: <json>\n\n" and the final "data: [DONE]\n\n".
#pragma once
#include <string>

namespace dsinfer::server {

inline std::string sse_data(const std::string& payload) {
  return "data: " + payload + "\n\n";
}
inline std::string sse_done() {
  return "data: [DONE]\n\n";
}

}  // namespace dsinfer::server
