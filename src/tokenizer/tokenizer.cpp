// Tokenizer: loading tokenizer.json / tokenizer_config.json and the encode / decode pipeline
// (added tokens -> pre-tokenizer -> BPE; ids -> bytes -> lossy UTF-8).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "tokenizer/file_io.h"
#include "tokenizer/json_fast.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace dsinfer {
namespace {

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(source, ": invalid JSON: ", e.what());
  }
}

const nlohmann::json& field(const nlohmann::json& j, const char* key) {
  static const nlohmann::json null_value;
  auto it = j.find(key);
  return it == j.end() ? null_value : *it;
}

std::shared_ptr<TokenizerImpl> build(const nlohmann::json& tj, const nlohmann::json* cj,
                                     const std::string& source, const BpeTables* tables) {
  DSI_CHECK(tj.is_object(), source, ": expected a JSON object");
  auto impl = std::make_shared<TokenizerImpl>();
  check_normalizer_is_identity(field(tj, "normalizer"));
  DSI_CHECK(tj.contains("model"), source, ": no 'model' section");
  impl->model = BpeModel::from_json(tj["model"], tables);
  impl->pre_tokenizer = PreTokenizer::from_json(field(tj, "pre_tokenizer"));
  impl->decoder = parse_decoder(field(tj, "decoder"));
  impl->added_tokens = parse_added_tokens(field(tj, "added_tokens"));

  std::vector<AddedToken> raw, normalized;
  int32_t max_id = impl->model->max_id();
  for (const AddedToken& t : impl->added_tokens) {
    (t.normalized ? normalized : raw).push_back(t);
    impl->added_by_content[t.content] = t.id;
    max_id = std::max(max_id, t.id);
  }
  impl->raw_matcher.build(raw);
  impl->normalized_matcher.build(normalized);

  const size_t n = static_cast<size_t>(max_id + 1);
  impl->token_string.resize(n);
  impl->output_bytes.resize(n);
  impl->known.assign(n, 0);
  impl->special.assign(n, 0);
  for (int32_t id = 0; id <= impl->model->max_id(); ++id) {
    if (const std::string* s = impl->model->id_to_token(id)) {
      impl->token_string[id] = *s;
      impl->known[id] = 1;
    }
  }
  StringIdMap special_contents;
  for (const AddedToken& t : impl->added_tokens) {
    impl->token_string[t.id] = t.content;
    impl->known[t.id] = 1;
    if (t.special) special_contents.emplace(t.content, t.id);
  }
  for (size_t id = 0; id < n; ++id) {
    if (!impl->known[id]) continue;
    impl->output_bytes[id] = token_output_bytes(impl->token_string[id], impl->decoder);
    impl->special[id] = special_contents.count(impl->token_string[id]) ? 1 : 0;
  }

  impl->wrap = parse_post_processor(field(tj, "post_processor"));
  if (cj) {
    impl->config = parse_tokenizer_config(*cj, "tokenizer_config.json");
    auto lookup = [&](const std::string& token) -> std::optional<int32_t> {
      if (token.empty()) return std::nullopt;
      if (auto it = impl->added_by_content.find(token); it != impl->added_by_content.end()) return it->second;
      return impl->model->token_to_id(token);
    };
    impl->bos_id = lookup(impl->config.bos_token);
    impl->eos_id = lookup(impl->config.eos_token);
    impl->pad_id = lookup(impl->config.pad_token);
    if (impl->config.add_bos_token || impl->config.add_eos_token) {
      // LlamaTokenizerFast rebuilds the post-processor from these flags.
      impl->add_bos = impl->config.add_bos_token.value_or(false);
      impl->add_eos = impl->config.add_eos_token.value_or(false);
      DSI_CHECK(!impl->add_bos || impl->bos_id, "tokenizer_config.json: add_bos_token is set but bos_token '",
                impl->config.bos_token, "' is not in the vocabulary");
      DSI_CHECK(!impl->add_eos || impl->eos_id, "tokenizer_config.json: add_eos_token is set but eos_token '",
                impl->config.eos_token, "' is not in the vocabulary");
      impl->wrap = SpecialWrap{};
      if (impl->add_bos) impl->wrap.prefix.push_back(*impl->bos_id);
      if (impl->add_eos) impl->wrap.suffix.push_back(*impl->eos_id);
    }
  }
  impl->add_bos = !impl->wrap.prefix.empty();
  impl->add_eos = !impl->wrap.suffix.empty();
  for (int32_t id : impl->wrap.prefix) impl->check_id(id);
  for (int32_t id : impl->wrap.suffix) impl->check_id(id);
  return impl;
}

std::shared_ptr<TokenizerImpl> build_guarded(const std::string& tokenizer_json,
                                             const std::string& config_json, const std::string& source,
                                             const std::string& config_source) {
  // The vocab and merges are most of the file: take them out with the fast scanner when it
  // understands the text, and parse the rest (or, failing that, everything) with nlohmann.
  std::optional<ExtractedTokenizerJson> fast = extract_bpe_tables(tokenizer_json);
  const nlohmann::json tj = parse_json(fast ? fast->rest : tokenizer_json, source);
  nlohmann::json cj;
  if (!config_json.empty()) cj = parse_json(config_json, config_source);
  try {
    return build(tj, config_json.empty() ? nullptr : &cj, source, fast ? &fast->tables : nullptr);
  } catch (const nlohmann::json::exception& e) {
    fail(source, ": unexpected structure: ", e.what());
  }
}

}  // namespace

void TokenizerImpl::check_id(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= known.size() || !known[id]) {
    fail("tokenizer: unknown token id ", id, " (vocab size ", known.size(), ")");
  }
}

void TokenizerImpl::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  thread_local PreTokenized pt;
  pre_tokenizer.run(text, pt);
  for (std::string_view piece : pt.pieces) {
    if (pt.byte_mapped) {
      model->encode_bytes(piece, out);
    } else {
      model->encode_chars(piece, out);
    }
  }
}

Tokenizer Tokenizer::from_json(const std::string& tokenizer_json, const std::string& tokenizer_config_json) {
  return Tokenizer(
      build_guarded(tokenizer_json, tokenizer_config_json, "tokenizer.json", "tokenizer_config.json"));
}

Tokenizer Tokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path base(dir);
  const std::string plain = (base / "tokenizer.json").string();
  const std::string gz = plain + ".gz";
  std::string text, source;
  if (fs::exists(plain)) {
    text = read_file(plain);
    source = plain;
  } else if (fs::exists(gz)) {
    text = read_gzip_file(gz);
    source = gz;
  } else {
    fail("tokenizer: neither '", plain, "' nor '", gz, "' exists");
  }
  const std::string config_path = (base / "tokenizer_config.json").string();
  std::string config;
  if (fs::exists(config_path)) {
    config = read_file(config_path);
    if (config.empty()) config = "{}";
  }
  auto impl = build_guarded(text, config, source, config_path);
  const std::string jinja = (base / "chat_template.jinja").string();
  if (impl->config.chat_template.empty() && fs::exists(jinja)) impl->config.chat_template = read_file(jinja);
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const TokenizerImpl& t = *impl_;
  if (const size_t bad = utf8::find_invalid(text); bad != utf8::kValid) {
    fail("tokenizer: input is not valid UTF-8 at byte offset ", bad);
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), t.wrap.prefix.begin(), t.wrap.prefix.end());
  thread_local std::vector<Segment> outer, inner;
  outer.clear();
  t.raw_matcher.split(text, 0, text.size(), outer);
  for (const Segment& seg : outer) {
    if (seg.token_id >= 0) {
      ids.push_back(seg.token_id);
      continue;
    }
    inner.clear();
    t.normalized_matcher.split(text, seg.begin, seg.end, inner);
    for (const Segment& s : inner) {
      if (s.token_id >= 0) {
        ids.push_back(s.token_id);
      } else {
        t.encode_plain(text.substr(s.begin, s.end - s.begin), ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), t.wrap.suffix.begin(), t.wrap.suffix.end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const TokenizerImpl& t = *impl_;
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    t.check_id(id);
    if (skip_special_tokens && t.special[id]) continue;
    if (t.decoder == DecoderKind::kNone && !first) bytes += ' ';
    bytes += t.output_bytes[id];
    first = false;
  }
  std::string out;
  out.reserve(bytes.size());
  utf8::append_lossy(bytes, /*final=*/true, out);
  return out;
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->known.size());
}
std::optional<int32_t> Tokenizer::bos_id() const {
  return impl_->bos_id;
}
std::optional<int32_t> Tokenizer::eos_id() const {
  return impl_->eos_id;
}
std::optional<int32_t> Tokenizer::pad_id() const {
  return impl_->pad_id;
}
const std::string& Tokenizer::bos_token() const {
  return impl_->config.bos_token;
}
const std::string& Tokenizer::eos_token() const {
  return impl_->config.eos_token;
}
const std::string& Tokenizer::pad_token() const {
  return impl_->config.pad_token;
}
bool Tokenizer::add_bos_token() const {
  return impl_->add_bos;
}
bool Tokenizer::add_eos_token() const {
  return impl_->add_eos;
}
const std::string& Tokenizer::chat_template() const {
  return impl_->config.chat_template;
}
std::optional<int64_t> Tokenizer::model_max_length() const {
  return impl_->config.model_max_length;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  impl_->check_id(id);
  return impl_->token_string[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id];
}

std::vector<int32_t> Tokenizer::added_token_ids() const {
  std::vector<int32_t> ids;
  for (const AddedToken& t : impl_->added_tokens) ids.push_back(t.id);
  return ids;
}

bool Tokenizer::has_id(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->known.size() && impl_->known[id];
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  impl_->check_id(id);
  return impl_->output_bytes[id];
}

}  // namespace dsinfer
