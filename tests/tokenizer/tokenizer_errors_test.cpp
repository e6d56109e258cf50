// Loading errors: missing files, corrupt JSON or gzip, unsupported components all give a clear
// dsinfer::Error naming the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "tokenizer_test_util.h"

namespace dsinfer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("dsinfer_tok_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string path() const { return path_.string(); }
  void write(const std::string& name, const std::string& content) const {
    std::ofstream(path_ / name, std::ios::binary) << content;
  }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

const char* kMinimal = R"({
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
  "decoder": {"type": "ByteLevel"}
})";

TEST(TokenizerErrors, MissingDirectoryNamesThePath) {
  const std::string msg = error_of([] { Tokenizer::load("/nonexistent/dsinfer/tok"); });
  EXPECT_THAT(msg, HasSubstr("/nonexistent/dsinfer/tok/tokenizer.json"));
}

TEST(TokenizerErrors, CorruptJsonNamesTheFile) {
  TempDir dir;
  dir.write("tokenizer.json", "{\"model\": {");
  const std::string msg = error_of([&] { Tokenizer::load(dir.path()); });
  EXPECT_THAT(msg, HasSubstr(dir.path() + "/tokenizer.json"));
  EXPECT_THAT(msg, HasSubstr("invalid JSON"));
}

TEST(TokenizerErrors, CorruptConfigNamesTheFile) {
  TempDir dir;
  dir.write("tokenizer.json", kMinimal);
  dir.write("tokenizer_config.json", "[1, 2");
  EXPECT_THAT(error_of([&] { Tokenizer::load(dir.path()); }), HasSubstr("tokenizer_config.json"));
}

TEST(TokenizerErrors, CorruptGzipNamesTheFile) {
  TempDir dir;
  dir.write("tokenizer.json.gz", "this is not gzip data");
  const std::string msg = error_of([&] { Tokenizer::load(dir.path()); });
  EXPECT_THAT(msg, HasSubstr("tokenizer.json.gz"));
}

TEST(TokenizerErrors, TruncatedGzip) {
  TempDir dir;
  std::ifstream in(testing::data_path("tokenizer/deepseek-v3/tokenizer.json.gz"), std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  dir.write("tokenizer.json.gz", gz.substr(0, gz.size() / 2));
  EXPECT_THAT(error_of([&] { Tokenizer::load(dir.path()); }), HasSubstr("tokenizer.json.gz"));
}

TEST(TokenizerErrors, PlainFileWinsOverGzip) {
  TempDir dir;
  dir.write("tokenizer.json", kMinimal);
  dir.write("tokenizer.json.gz", "garbage");
  EXPECT_EQ(Tokenizer::load(dir.path()).vocab_size(), 3);
}

TEST(TokenizerErrors, UnsupportedComponents) {
  auto with = [](const std::string& key, const std::string& value) {
    nlohmann::json j = nlohmann::json::parse(kMinimal);
    j[key] = nlohmann::json::parse(value);
    return j.dump();
  };
  EXPECT_THAT(error_of([&] { Tokenizer::from_json(with("normalizer", R"({"type": "NFKC"})")); }),
              HasSubstr("unsupported normalizer type 'NFKC'"));
  EXPECT_THAT(error_of([&] { Tokenizer::from_json(with("pre_tokenizer", R"({"type": "Metaspace"})")); }),
              HasSubstr("unsupported pre_tokenizer type 'Metaspace'"));
  EXPECT_THAT(error_of([&] { Tokenizer::from_json(with("decoder", R"({"type": "WordPiece"})")); }),
              HasSubstr("unsupported decoder type 'WordPiece'"));
  EXPECT_THAT(error_of([&] { Tokenizer::from_json(with("model", R"({"type": "Unigram", "vocab": []})")); }),
              HasSubstr("unsupported model type 'Unigram'"));
  EXPECT_THAT(
      error_of([&] {
        Tokenizer::from_json(with("model", R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a c"]})"));
      }),
      HasSubstr("merge 1"));
  EXPECT_THAT(
      error_of([&] {
        Tokenizer::from_json(with(
            "pre_tokenizer",
            R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated", "invert": false})"));
      }),
      HasSubstr("cannot compile regex"));
  EXPECT_THAT(error_of([&] { Tokenizer::from_json("[]"); }), HasSubstr("expected a JSON object"));
  EXPECT_THAT(error_of([&] { Tokenizer::from_json(R"({"model": 5})"); }),
              HasSubstr("'model' must be an object"));
  EXPECT_THAT(error_of([&] { Tokenizer::from_json(kMinimal, R"({"bos_token": 7})"); }),
              HasSubstr("bos_token"));
  EXPECT_THAT(
      error_of([&] { Tokenizer::from_json(kMinimal, R"({"add_bos_token": true, "bos_token": "<s>"})"); }),
      HasSubstr("not in the vocabulary"));
}

TEST(TokenizerErrors, ChatTemplateForms) {
  EXPECT_EQ(Tokenizer::from_json(kMinimal, R"({"chat_template": "{{x}}"})").chat_template(), "{{x}}");
  EXPECT_EQ(Tokenizer::from_json(kMinimal, R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                                                 {"name": "default", "template": "D"}]})")
                .chat_template(),
            "D");
  EXPECT_EQ(Tokenizer::from_json(kMinimal).chat_template(), "");
  EXPECT_EQ(Tokenizer::from_json(kMinimal).bos_id(), std::nullopt);
  EXPECT_EQ(Tokenizer::from_json(kMinimal).bos_token(), "");
}

}  // namespace
}  // namespace dsinfer
