// Jinja lexer: splits template source into text and tag tokens, applying whitespace control
// ({%- -%} {{- -}} {#- -#}, '+' modifiers) and transformers' trim_blocks / lstrip_blocks settings.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dsinfer::jinja {

struct Token {
  enum class Type { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
  Type type;
  std::string text;  // text for Text, identifier, decoded string value, number spelling, operator
  int line;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws dsinfer::Error on malformed input (unclosed tags, strings, unbalanced brackets).
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace dsinfer::jinja
