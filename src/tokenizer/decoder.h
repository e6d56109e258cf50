// Decoders of tokenizer.json: ByteLevel (optionally inside a Sequence) or none. Each id's
// contribution is a fixed byte string, which makes streaming decode exact.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace dsinfer {

enum class DecoderKind {
  kByteLevel,  // bytes of each token through the byte-level alphabet, then lossy UTF-8
  kNone,       // no decoder: tokens joined with spaces
};

// Parses the "decoder" value; throws on unsupported decoders.
DecoderKind parse_decoder(const nlohmann::json& j);

// The bytes a token string contributes under `kind`. For ByteLevel, a token with a character
// outside the alphabet contributes its own UTF-8 bytes (as Hugging Face does).
std::string token_output_bytes(const std::string& token, DecoderKind kind);

}  // namespace dsinfer
