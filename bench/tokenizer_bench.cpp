// Tokenizer benchmarks: loading the DeepSeek-V3 tokenizer and encoding mixed text on one core
// (English prose, C++ code, Chinese / Japanese / Korean, emoji), reported as bytes per second.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;

const std::string kTokDir = std::string(DSINFER_SOURCE_DIR) + "/tests/data/tokenizer/deepseek-v3";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const dsinfer::Tokenizer& tokenizer() {
  static const dsinfer::Tokenizer tok = dsinfer::Tokenizer::load(kTokDir);
  return tok;
}

// About 1 MB: this repository's C++ sources, English licence text, and the fixture texts
// (Chinese, Japanese, Korean, Russian, Arabic, emoji) with extra CJK prose.
const std::string& mixed_corpus() {
  static const std::string corpus = [] {
    std::string code, prose, intl;
    for (const auto& e : fs::recursive_directory_iterator(std::string(DSINFER_SOURCE_DIR) + "/src")) {
      const auto ext = e.path().extension();
      if (e.is_regular_file() && (ext == ".cpp" || ext == ".h" || ext == ".cu")) code += slurp(e.path());
    }
    for (const char* lic : {"GPL-3", "Apache-2.0", "GFDL-1.3", "LGPL-3", "MPL-2.0", "Artistic"}) {
      prose += slurp(fs::path("/usr/share/common-licenses") / lic);
    }
    const auto cases = nlohmann::json::parse(slurp(kTokDir + "/cases.json"))["cases"];
    for (const auto& c : cases) intl += c["text"].get<std::string>() + "\n";
    intl +=
        "深度求索的模型在推理时需要高效的分词器。我们测量每秒处理的字节数，并比较不同实现的速度。"
        "中文文本没有空格，因此预分词依赖于正则表达式中的汉字范围。今天天气很好，我们去公园散步吧！"
        "東京の天気は晴れです。明日は雨が降るかもしれません。トークナイザーの性能を測定します。"
        "😀😃😄😁😆🥹😅😂🤣🥲☺️😊😇🙂🙃😉😌😍🥰😘 "
        "👩‍💻👨‍👩‍👧‍👦🏳️‍🌈 "
        "🇨🇳🇯🇵🇰🇷\n";
    std::string out;
    while (out.size() < (1u << 20)) {
      out += code.substr(0, 300 * 1024);
      out += prose.substr(0, 300 * 1024);
      for (int i = 0; i < 40; ++i) out += intl;
    }
    return out;
  }();
  return corpus;
}

void BM_LoadDeepSeekV3Gz(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(dsinfer::Tokenizer::load(kTokDir));
}
BENCHMARK(BM_LoadDeepSeekV3Gz)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_LoadDeepSeekV3Json(benchmark::State& state) {
  // The same file uncompressed, through from_json (JSON parsing + tables, no gunzip or disk).
  static const std::string json = [] {
    const fs::path tmp = fs::temp_directory_path() / "dsinfer_bench_tok";
    fs::create_directories(tmp);
    std::string s;
    {
      const std::string cmd =
          "gzip -dc '" + kTokDir + "/tokenizer.json.gz' > '" + (tmp / "t.json").string() + "'";
      if (std::system(cmd.c_str()) != 0) return s;
    }
    s = slurp(tmp / "t.json");
    fs::remove_all(tmp);
    return s;
  }();
  const std::string config = slurp(kTokDir + "/tokenizer_config.json");
  for (auto _ : state) benchmark::DoNotOptimize(dsinfer::Tokenizer::from_json(json, config));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * json.size()));
}
BENCHMARK(BM_LoadDeepSeekV3Json)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_EncodeMixed(benchmark::State& state) {
  const auto& tok = tokenizer();
  const std::string& text = mixed_corpus();
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = tok.encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["bytes"] = static_cast<double>(text.size());
}
BENCHMARK(BM_EncodeMixed)->Unit(benchmark::kMillisecond);

void BM_EncodeShortPrompt(benchmark::State& state) {
  const auto& tok = tokenizer();
  const std::string text =
      "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>What is 2+2?<｜Assistant｜>";
  for (auto _ : state) benchmark::DoNotOptimize(tok.encode(text));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_EncodeShortPrompt);

void BM_EncodeMegabyteOfSpaces(benchmark::State& state) {
  const auto& tok = tokenizer();
  const std::string text(1 << 20, ' ');
  for (auto _ : state) benchmark::DoNotOptimize(tok.encode(text));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_EncodeMegabyteOfSpaces)->Unit(benchmark::kMillisecond);

void BM_Encode100KbWord(benchmark::State& state) {
  const auto& tok = tokenizer();
  std::string word;
  for (int i = 0; word.size() < 100 * 1024; ++i) word += "abcdefghijklmnopqrstuvwxyz"[(i * 7) % 26];
  for (auto _ : state) benchmark::DoNotOptimize(tok.encode(word));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * word.size()));
}
BENCHMARK(BM_Encode100KbWord)->Unit(benchmark::kMillisecond);

void BM_DecodeMixed(benchmark::State& state) {
  const auto& tok = tokenizer();
  const auto ids = tok.encode(mixed_corpus());
  for (auto _ : state) benchmark::DoNotOptimize(tok.decode(ids));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * mixed_corpus().size()));
}
BENCHMARK(BM_DecodeMixed)->Unit(benchmark::kMillisecond);

void BM_IncrementalDetokenize(benchmark::State& state) {
  const auto& tok = tokenizer();
  const auto ids = tok.encode(mixed_corpus().substr(0, 200000));
  for (auto _ : state) {
    dsinfer::IncrementalDetokenizer d(tok);
    size_t n = 0;
    for (int32_t id : ids) n += d.push(id).size();
    benchmark::DoNotOptimize(n);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
}
BENCHMARK(BM_IncrementalDetokenize)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
