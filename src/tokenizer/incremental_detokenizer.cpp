// IncrementalDetokenizer: holds back only the bytes of a UTF-8 sequence that may still complete.
#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace dsinfer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  const TokenizerImpl& t = *tok_.impl_;
  t.check_id(id);
  if (skip_special_ && t.special[id]) return "";
  if (t.decoder == DecoderKind::kNone && !first_) pending_ += ' ';
  first_ = false;
  pending_ += t.output_bytes[id];
  std::string out;
  const size_t used = utf8::append_lossy(pending_, /*final=*/false, out);
  pending_.erase(0, used);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  utf8::append_lossy(pending_, /*final=*/true, out);
  pending_.clear();
  return out;
}

}  // namespace dsinfer
