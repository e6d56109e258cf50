// Parts of the request body with the key order of its text (nlohmann::json, which parsed the body, keeps
// keys sorted): JSON Schemas whose properties are generated in the order they are declared. The text is
// parsed in order at most once per request, however many parts are read (one per tool with parameters).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

namespace dsinfer::server {

class OrderedBody {
 public:
  explicit OrderedBody(std::string_view raw_body) : raw_(raw_body) {}

  // The value at `pointer` in the text, in order; `parsed` (the same value from the parsed body) in sorted
  // order when the text is empty or does not hold it.
  nlohmann::ordered_json part(const nlohmann::ordered_json::json_pointer& pointer,
                              const nlohmann::json& parsed) {
    if (!parsed_ && !raw_.empty()) {
      parsed_ = true;
      try {
        doc_ = nlohmann::ordered_json::parse(raw_);
      } catch (const std::exception&) {
        // Parsed once already as the request; the sorted copies below serve.
      }
    }
    if (doc_) {
      try {
        return doc_->at(pointer);
      } catch (const std::exception&) {
      }
    }
    return nlohmann::ordered_json::parse(parsed.dump());
  }

 private:
  std::string_view raw_;
  bool parsed_ = false;
  std::optional<nlohmann::ordered_json> doc_;
};

}  // namespace dsinfer::server
