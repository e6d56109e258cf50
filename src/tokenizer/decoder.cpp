// Decoder parsing and per-token output bytes.
#include "tokenizer/decoder.h"

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace dsinfer {

DecoderKind parse_decoder(const nlohmann::json& j) {
  if (j.is_null()) return DecoderKind::kNone;
  DSI_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(),
            "tokenizer: decoder must be null or an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return DecoderKind::kByteLevel;
  if (type == "Sequence") {
    DSI_CHECK(j.contains("decoders") && j["decoders"].is_array(),
              "tokenizer: Sequence decoder needs 'decoders'");
    const auto& list = j["decoders"];
    if (list.empty()) return DecoderKind::kNone;
    DSI_CHECK(list.size() == 1, "tokenizer: only a Sequence holding one ByteLevel decoder is supported");
    return parse_decoder(list[0]);
  }
  fail("tokenizer: unsupported decoder type '", type, "' (supported: ByteLevel)");
}

std::string token_output_bytes(const std::string& token, DecoderKind kind) {
  if (kind == DecoderKind::kNone) return token;
  std::string bytes;
  if (byte_level::unmap(token, bytes)) return bytes;
  return token;
}

}  // namespace dsinfer
