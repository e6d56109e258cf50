// Public tokenizer API: a Hugging Face tokenizer.json byte-level BPE tokenizer (DeepSeek models)
// plus the tokenizer_config.json settings, and a streaming detokenizer.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsinfer {

struct TokenizerImpl;

class Tokenizer {
 public:
  // Reads dir/tokenizer.json (or dir/tokenizer.json.gz when the plain file is absent) and
  // dir/tokenizer_config.json when present. Throws dsinfer::Error naming the bad file.
  static Tokenizer load(const std::string& dir);
  // Builds a tokenizer from the file contents; an empty config means "no tokenizer_config.json".
  static Tokenizer from_json(const std::string& tokenizer_json,
                             const std::string& tokenizer_config_json = "");

  // Encodes UTF-8 text (throws dsinfer::Error naming the byte offset of invalid UTF-8).
  // add_special_tokens adds BOS/EOS as tokenizer_config.json says (or the post-processor template).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Decodes ids; ill-formed UTF-8 becomes U+FFFD. Throws dsinfer::Error on an unknown id.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const;             // max id + 1 over vocab and added tokens
  std::optional<int32_t> bos_id() const;  // from tokenizer_config.json
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;
  const std::string& bos_token() const;  // "" when none
  const std::string& eos_token() const;
  const std::string& pad_token() const;
  bool add_bos_token() const;
  bool add_eos_token() const;
  const std::string& chat_template() const;  // "" when none
  std::optional<int64_t> model_max_length() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // the raw vocab string; throws on an unknown id
  bool is_special(int32_t id) const;
  // The ids of the added tokens (tokenizer.json's added_tokens, special or not).
  std::vector<int32_t> added_token_ids() const;
  // Whether id names a token (vocabularies may have gaps below vocab_size()).
  bool has_id(int32_t id) const;

  // The bytes an id contributes to decoded text (before UTF-8 repair). Throws on an unknown id.
  const std::string& token_bytes(int32_t id) const;

 private:
  friend class IncrementalDetokenizer;
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const TokenizerImpl> impl_;
};

// Streaming decode: push ids one by one; the deltas never split a UTF-8 character and their
// concatenation (with flush()) equals Tokenizer::decode of all pushed ids.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens = false);
  std::string push(int32_t id);  // returns the new complete text
  std::string flush();           // at end of stream: held bytes (U+FFFD where incomplete)

 private:
  Tokenizer tok_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
  bool first_ = true;
};

}  // namespace dsinfer
