// The immutable state behind Tokenizer (shared by copies; safe for concurrent use).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace dsinfer {

struct TokenizerImpl {
  std::unique_ptr<BpeModel> model;
  PreTokenizer pre_tokenizer;
  std::vector<AddedToken> added_tokens;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized=false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized=true
  StringIdMap added_by_content;
  DecoderKind decoder = DecoderKind::kByteLevel;
  SpecialWrap wrap;  // what add_special_tokens adds
  TokenizerConfig config;
  std::optional<int32_t> bos_id, eos_id, pad_id;
  bool add_bos = false, add_eos = false;

  // Indexed by id, over [0, vocab_size).
  std::vector<std::string> token_string;  // what id_to_token returns
  std::vector<std::string> output_bytes;  // what decode emits for the id
  std::vector<uint8_t> known;             // id exists
  std::vector<uint8_t> special;           // id is a special token

  void check_id(int32_t id) const;
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
};

}  // namespace dsinfer
