// End-to-end tests of the dsinfer binary: generate (greedy equals transformers), tokenize, eval golden /
// ppl output shapes, and clear errors with a non-zero exit for bad input.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace {

struct CliRun {
  int status = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

CliRun run(const std::string& args) {
  static int counter = 0;
  const std::string err_path =
      (std::filesystem::temp_directory_path() /
       ("dsinfer_cli_err_" + std::to_string(getpid()) + "_" + std::to_string(counter++)))
          .string();
  const std::string cmd = std::string(DSINFER_BINARY) + " " + args + " 2>" + err_path;
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  std::filesystem::remove(err_path);
  return r;
}

const std::string kModel = std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code";
const std::string kV3Tokenizer = std::string(DSINFER_TEST_DATA) + "/tokenizer/deepseek-v3";

std::string temp_file(const std::string& name, const std::string& content) {
  auto path =
      std::filesystem::temp_directory_path() / ("dsinfer_cli_" + std::to_string(getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary) << content;
  return path.string();
}

TEST(GenerateCli, GreedyMatchesTransformersTokenForToken) {
  std::ifstream in(kModel + "/greedy_cases.json");
  nlohmann::json cases = nlohmann::json::parse(in)["cases"];
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    CliRun r =
        run("generate --model " + kModel + " --device cpu --temperature 0 --max-tokens 48 --json --prompt " +
            shell_quote(c["prompt"].get<std::string>()));
    ASSERT_EQ(r.status, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ids"], c["greedy_ids"]) << c["prompt"];
    EXPECT_EQ(j["text"], c["greedy_text"]) << c["prompt"];
    EXPECT_EQ(j["usage"]["prompt_tokens"], c["prompt_ids"].size());
    EXPECT_EQ(j["usage"]["completion_tokens"], c["greedy_ids"].size());
    EXPECT_TRUE(j["finish_reason"] == "length" || j["finish_reason"] == "stop");
  }
}

TEST(GenerateCli, StreamsPromptAndCompletionToStdout) {
  CliRun r = run("generate --model " + kModel + " --device cpu --max-tokens 8 --prompt 'import os'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("import os", 0), 0u);
  EXPECT_GT(r.out.size(), std::string("import os").size());
}

TEST(GenerateCli, SeededSamplingIsReproducible) {
  const std::string args =
      "generate --model " + kModel +
      " --device cpu --temperature 0.9 --top-p 0.95 --top-k 50 --seed 7 --max-tokens 24 --json "
      "--prompt 'class Foo:'";
  CliRun a = run(args), b = run(args);
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["ids"], nlohmann::json::parse(b.out)["ids"]);
  CliRun c = run("generate --model " + kModel +
                 " --device cpu --temperature 0.9 --seed 8 --max-tokens 24 --json --prompt 'class Foo:'");
  ASSERT_EQ(c.status, 0);
}

TEST(GenerateCli, StopStringEndsGenerationWithoutIt) {
  CliRun r =
      run("generate --model " + kModel + " --device cpu --max-tokens 48 --json --stop '\"\"\"' --prompt " +
          shell_quote("def fibonacci(n):\n"));
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["finish_reason"], "stop");
  EXPECT_EQ(j["text"].get<std::string>().find("\"\"\""), std::string::npos);
}

TEST(GenerateCli, InputFileRunsEveryLineInOrder) {
  std::string path = temp_file("gen.jsonl",
                               "{\"prompt\": \"def fibonacci(n):\\n\", \"max_tokens\": 5}\n\n"
                               "{\"prompt\": \"# Copyright\", \"max_tokens\": 3}\n");
  CliRun r = run("generate --model " + kModel + " --device cpu --json --input " + path);
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string l1, l2;
  std::getline(lines, l1);
  std::getline(lines, l2);
  EXPECT_EQ(nlohmann::json::parse(l1)["ids"], nlohmann::json({263, 394, 44, 72, 80}));
  EXPECT_EQ(nlohmann::json::parse(l2)["usage"]["completion_tokens"], 3);
  std::filesystem::remove(path);
}

TEST(GenerateCli, BadInputIsAClearErrorWithNonZeroExit) {
  struct Case {
    std::string args;
    std::string message;
  };
  const std::string bad_jsonl = temp_file("bad.jsonl", "{\"prompt\": \"x\"}\n{not json\n");
  const std::string long_prompt(20000, 'x');
  std::vector<Case> cases = {
      {"generate --model /nonexistent/model --prompt hi", "/nonexistent/model"},
      {"generate --model " + kModel + " --prompt ''", "exactly one of"},
      {"generate --model " + kModel, "exactly one of"},
      {"generate --model " + kModel + " --prompt hi --chat hi", "exactly one of"},
      {"generate --model " + kModel + " --input /nonexistent.jsonl", "/nonexistent.jsonl"},
      {"generate --model " + kModel + " --input " + bad_jsonl, ":2: invalid JSON"},
      {"generate --model " + kModel + " --prompt \"$(printf '\\377\\376')\"", "UTF-8"},
      {"generate --model " + kModel + " --prompt hi --top-p 0", "top_p"},
      {"generate --model " + kModel + " --prompt hi --temperature -1", "temperature"},
      {"generate --model " + kModel + " --prompt " + long_prompt, "context"},
      {"generate --model " + kModel + " --prompt hi --device tpu", "device"},
  };
  for (const Case& c : cases) {
    CliRun r = run(c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args.substr(0, 120) << "\nstderr: " << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
  }
  std::filesystem::remove(bad_jsonl);
}

TEST(TokenizeCli, TextAndInputAndMessagesMatchTransformers) {
  CliRun r = run("tokenize --model " + kV3Tokenizer + " --json --text " +
                 shell_quote("Hello, world! This is a test of the DeepSeek tokenizer."));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ids"],
            nlohmann::json(
                {19923, 14, 2058, 3, 1162, 344, 260, 1950, 294, 270, 22651, 4374, 1465, 17840, 9160, 16}));

  std::string jsonl = temp_file("tok.jsonl", "{\"text\": \"Hello\"}\n{\"text\": \"\"}\n");
  r = run("tokenize --model " + kV3Tokenizer + " --input " + jsonl);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "{\"ids\":[19923]}\n{\"ids\":[]}\n");
  std::filesystem::remove(jsonl);

  std::ifstream in(kV3Tokenizer + "/chat_cases.json");
  nlohmann::json chat = nlohmann::json::parse(in);
  ASSERT_TRUE(chat.contains("cases"));
  int checked = 0;
  for (const auto& c : chat["cases"]) {
    const bool gen = c.value("add_generation_prompt", false);
    std::string msgs = temp_file("msgs.json", c["messages"].dump());
    r = run("tokenize --model " + kV3Tokenizer + " --messages " + msgs +
            (gen ? " --add-generation-prompt" : ""));
    ASSERT_EQ(r.status, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["prompt"], c["rendered"]);
    EXPECT_EQ(j["ids"], c["ids"]);
    std::filesystem::remove(msgs);
    ++checked;
  }
  EXPECT_GT(checked, 0) << "chat_cases.json layout not understood";
}

TEST(TokenizeCli, Errors) {
  CliRun r = run("tokenize --model /nonexistent --text hi");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("/nonexistent"), std::string::npos) << r.err;
  r = run("tokenize --model " + kV3Tokenizer);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("exactly one of"), std::string::npos) << r.err;
  std::string bad = temp_file("bad.json", "[{\"role\": 3}]");
  r = run("tokenize --model " + kV3Tokenizer + " --messages " + bad);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("role"), std::string::npos) << r.err;
  std::filesystem::remove(bad);
}

TEST(EvalCli, GoldenJsonShapeAndExitStatus) {
  CliRun r = run("eval golden --model " + kModel + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["pass"], true);
  ASSERT_EQ(j["cases"].size(), 2u);
  for (const auto& c : j["cases"]) {
    for (const char* key : {"case", "tokens", "max_abs_err", "rel_l2_err", "greedy_match"}) {
      EXPECT_TRUE(c.contains(key)) << key;
    }
  }
  // A golden for another model fails cleanly (shape mismatch), never crashes.
  r = run("eval golden --model " + kModel + " --golden " + std::string(DSINFER_TEST_DATA) +
          "/models/tiny-llama/golden.safetensors");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("logits.0"), std::string::npos) << r.err;
}

TEST(EvalCli, PerplexityOnTheFirstWindows) {
  CliRun r =
      run("eval ppl --model " + kModel + " --corpus " + kModel + "/eval_corpus.txt --max-windows 4 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["windows"], 4);
  EXPECT_EQ(j["scored_tokens"], 4 * 255);
  EXPECT_GT(j["ppl"].get<double>(), 1.0);
  EXPECT_NEAR(std::exp(j["mean_nll"].get<double>()), j["ppl"].get<double>(), 1e-9 * j["ppl"].get<double>());
  r = run("eval ppl --model " + kModel + " --corpus /nonexistent.txt");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("/nonexistent.txt"), std::string::npos);
}

}  // namespace

namespace {

TEST(CheckCli, ReportsV4FlashSizesFromThePublishedConfig) {
  const std::string flash = std::string(DSINFER_TEST_DATA) + "/configs/deepseek-v4-flash.json";
  CliRun r = run("check --model " + flash + " --gpu sm_90 --gpu-memory-gib 141 --precision fp8 --json");
  ASSERT_NE(r.out.find('{'), std::string::npos) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  const auto& m = j["model"];
  EXPECT_EQ(m["architecture"], "deepseek_v4");
  EXPECT_NEAR(m["total_params"].get<double>(), 284e9, 3e9);    // published: 284B total
  EXPECT_NEAR(m["active_params"].get<double>(), 13e9, 1.5e9);  // published: 13B active
  EXPECT_GT(m["kv_bytes_per_token_bf16"].get<double>(), 0.0);
  EXPECT_LT(m["kv_bytes_per_token_bf16"].get<double>(), 70000.0);  // far below V3's 70 KB/token
  // 149 GB of published FP8 + FP4 weights do not fit next to a workspace in 141 GiB.
  EXPECT_EQ(j["memory_plan"]["fits"], false);
  EXPECT_EQ(r.status, 2);
}

TEST(CheckCli, MemoryPlanAndWarnings) {
  CliRun r = run("check --model " + kModel +
                 " --gpu sm_80 --gpu-memory-gib 1 --precision fp8 --context-chunk-size 500 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["target"]["precision"], "bf16");
  const auto& plan = j["memory_plan"];
  EXPECT_EQ(plan["fits"], true);
  EXPECT_EQ(plan["kv_tokens"].get<int64_t>() % 64, 0);
  EXPECT_LE(plan["weight_bytes"].get<int64_t>() + plan["workspace_bytes"].get<int64_t>() +
                plan["kv_bytes"].get<int64_t>(),
            int64_t{1} << 30);
  std::string warnings = j["warnings"].dump();
  EXPECT_NE(warnings.find("FP8 requested on sm_80"), std::string::npos);
  EXPECT_NE(warnings.find("not a multiple of kv_block_size"), std::string::npos);
  EXPECT_EQ(j["model"]["checkpoint"]["tensors"].get<int64_t>() > 0, true);
}

// `dsinfer check --model MODEL ARGS --json`'s memory plan (the run must succeed).
nlohmann::json check_memory_plan(const std::string& model, const std::string& args) {
  CliRun r = run("check --model " + model + " " + args + " --json");
  EXPECT_EQ(r.status, 0) << r.err;
  return nlohmann::json::parse(r.out)["memory_plan"];
}

// The Hopper path's packed GEMV copies (the dense MLP's gate/up and the LM head) are planned on sm_90 when
// 30% of the GPU stays free after them, never on sm_80, and the KV cache gets what is left.
TEST(CheckCli, PlansThePackedGemvCopiesOnHopper) {
  const std::string llama8b = std::string(DSINFER_SOURCE_DIR) + "/bench/configs/llama-3.1-8b";
  auto plan_of = [&](const std::string& args) { return check_memory_plan(llama8b, args); };
  const int64_t packed = int64_t{32} * 2 * 14336 * 4096 * 2 + int64_t{128256} * 4096 * 2;  // ~8.6 GB
  const auto hopper = plan_of("--gpu sm_90 --gpu-memory-gib 141");
  EXPECT_EQ(hopper["gemv_packed_bytes"].get<int64_t>(), packed);
  const auto ampere = plan_of("--gpu sm_80 --gpu-memory-gib 141");
  EXPECT_EQ(ampere["gemv_packed_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(ampere["weight_bytes"], hopper["weight_bytes"]);
  EXPECT_GT(ampere["kv_bytes"].get<int64_t>(), hopper["kv_bytes"].get<int64_t>());
  // 32 GiB: 16 GB of weights and 8.6 GB of copies would leave less than 30% free, so no copies.
  EXPECT_EQ(plan_of("--gpu sm_90 --gpu-memory-gib 32")["gemv_packed_bytes"].get<int64_t>(), 0);
}

// With DSINFER_GEMV_UNITS_PACKED the MoE experts' packed copies are planned too: every MoE layer's routed and
// shared experts once more (V2-Lite: 26 layers x 66 experts x 3 x 1408 x 2048 bf16, ~29.7 GB), on sm_90 only,
// with auto only where 30% of the GPU stays free, with 1 always; unset, never.
TEST(CheckCli, PlansTheExpertsPackedCopiesWhenAsked) {
  const std::string lite = std::string(DSINFER_SOURCE_DIR) + "/bench/configs/deepseek-v2-lite";
  auto packed_bytes = [&](const char* mode, const std::string& args) {
    if (mode)
      setenv("DSINFER_GEMV_UNITS_PACKED", mode, 1);
    else
      unsetenv("DSINFER_GEMV_UNITS_PACKED");
    const int64_t bytes = check_memory_plan(lite, args)["gemv_packed_bytes"].get<int64_t>();
    unsetenv("DSINFER_GEMV_UNITS_PACKED");
    return bytes;
  };
  const int64_t experts = int64_t{26} * 66 * 3 * 1408 * 2048 * 2;
  const int64_t dense =
      packed_bytes(nullptr, "--gpu sm_90 --gpu-memory-gib 141");  // layer 0's gate/up, LM head
  EXPECT_GT(dense, 0);
  EXPECT_EQ(packed_bytes("auto", "--gpu sm_90 --gpu-memory-gib 141"), dense + experts);
  EXPECT_EQ(packed_bytes("1", "--gpu sm_90 --gpu-memory-gib 141"), dense + experts);
  EXPECT_EQ(packed_bytes("0", "--gpu sm_90 --gpu-memory-gib 141"), dense);
  EXPECT_EQ(packed_bytes("auto", "--gpu sm_80 --gpu-memory-gib 141"), 0);
  // 80 GiB: 31 GB of weights and 30 GB of copies would leave under 30% free: auto makes none, 1 all.
  const int64_t dense80 = packed_bytes(nullptr, "--gpu sm_90 --gpu-memory-gib 80");
  EXPECT_EQ(packed_bytes("auto", "--gpu sm_90 --gpu-memory-gib 80"), dense80);
  EXPECT_EQ(packed_bytes("1", "--gpu sm_90 --gpu-memory-gib 80"), dense80 + experts);
}

// The CUDA graphs' pool (one decode step of the largest graphed batch: its activations and [rows, vocab] fp32
// logits, + 1/8) is kept out of the KV cache, sized by --cuda-graph-max-batch-size (default 256, capped by
// max_batch_size, 0: max_batch_size).
TEST(CheckCli, KeepsTheCudaGraphsPoolOutOfTheKvCache) {
  const std::string lite = std::string(DSINFER_SOURCE_DIR) + "/bench/configs/deepseek-v2-lite";
  auto plan_of = [&](const std::string& args) {
    return check_memory_plan(lite, "--gpu sm_90 --gpu-memory-gib 80 " + args);
  };
  const auto dflt = plan_of("--max-batch-size 1024");
  const auto g256 = plan_of("--max-batch-size 1024 --cuda-graph-max-batch-size 256");
  const auto g1024 = plan_of("--max-batch-size 1024 --cuda-graph-max-batch-size 0");
  const auto g64 = plan_of("--max-batch-size 64");  // the cap is max_batch_size
  EXPECT_EQ(dflt["cuda_graph_bytes"], g256["cuda_graph_bytes"]);
  const int64_t logits_row = int64_t{102400} * 4;
  EXPECT_GE(g256["cuda_graph_bytes"].get<int64_t>(), 256 * logits_row);
  EXPECT_GE(g1024["cuda_graph_bytes"].get<int64_t>(), 1024 * logits_row);
  EXPECT_EQ(g1024["cuda_graph_bytes"].get<int64_t>(), 4 * g256["cuda_graph_bytes"].get<int64_t>());
  EXPECT_EQ(g256["cuda_graph_bytes"].get<int64_t>(), 4 * g64["cuda_graph_bytes"].get<int64_t>());
  EXPECT_GT(g256["kv_bytes"].get<int64_t>(), g1024["kv_bytes"].get<int64_t>());
}

// What one decode token reads (the batch-1 roofline's bytes): the active weights with the embedding as one
// row. Llama-3.1-8B: 8,030,261,248 parameters, an untied 128256 x 4096 embedding; V2-Lite: 6 of 64 routed
// experts a token.
TEST(CheckCli, DecodeParamsCountTheEmbeddingAsOneRow) {
  auto model_of = [](const std::string& dir) {
    CliRun r = run("check --model " + std::string(DSINFER_SOURCE_DIR) + "/bench/configs/" + dir +
                   " --gpu sm_90 --gpu-memory-gib 141 --json");
    EXPECT_EQ(r.status, 0) << r.err;
    return nlohmann::json::parse(r.out)["model"];
  };
  const auto llama = model_of("llama-3.1-8b");
  EXPECT_EQ(llama["total_params"].get<int64_t>(), int64_t{8030261248});
  EXPECT_EQ(llama["decode_params"].get<int64_t>(), int64_t{8030261248} - int64_t{128256} * 4096 + 4096);
  const auto lite = model_of("deepseek-v2-lite");
  const int64_t H = 2048, routed_unused = int64_t{26} * (64 - 6) * 3 * 1408 * H;
  EXPECT_EQ(lite["active_params"].get<int64_t>(), lite["total_params"].get<int64_t>() - routed_unused);
  EXPECT_EQ(lite["decode_params"].get<int64_t>(),
            lite["active_params"].get<int64_t>() - int64_t{102400} * H + H);
  EXPECT_NEAR(2.0 * lite["decode_params"].get<double>(), 4.9e9, 0.2e9);  // the issue's ~4.9 GB
}

TEST(CheckCli, KernelsFromTheOpRegistryPerArchitecture) {
  // The activation settings' defaults, whatever the caller's environment holds (restored after).
  struct UnsetForTest {
    std::vector<std::pair<std::string, std::string>> saved;
    UnsetForTest() {
      for (const char* var : {"DSINFER_GEMV_ACT_PARTS", "DSINFER_CUDA_GEMM"}) {
        if (const char* v = std::getenv(var)) saved.emplace_back(var, v);
        unsetenv(var);
      }
    }
    ~UnsetForTest() {
      for (const auto& [var, value] : saved) setenv(var.c_str(), value.c_str(), 1);
    }
  } defaults;
  const std::string data = std::string(DSINFER_TEST_DATA) + "/models/";
  CliRun r = run("check --model " + data + "tiny-llama --gpu sm_80 --max-num-tokens 32 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["target"]["arch_path"], "sm_80");
  EXPECT_EQ(j["target"]["compute_capability"], "8.0");
  EXPECT_NE(j["target"]["memory_source"].get<std::string>().find("A100 80 GB"), std::string::npos);
  EXPECT_EQ(j["target"]["memory_bytes"].get<int64_t>(), int64_t{81920} << 20);
  EXPECT_EQ(j["settings"]["max_num_tokens"], 32);
  // Activation precision as the backend will use it: a dense model's decode GEMVs round to bf16 (one part), a
  // mixture of experts keeps two (below).
  EXPECT_EQ(j["target"]["gemm_activations"], "bf16");
  EXPECT_EQ(j["target"]["decode_gemv_activation_parts"], 1);
  const std::string warnings = j["warnings"].dump();
  EXPECT_NE(warnings.find("max_num_tokens 32 is smaller than kv_block_size 64"), std::string::npos)
      << warnings;
#ifdef DSINFER_HAVE_CUDA
  EXPECT_EQ(j["kernels"]["runs_on_gpu"], true);
  EXPECT_TRUE(j["kernels"]["ops_without_cuda_kernel"].empty());
  bool found = false;
  for (const auto& op : j["kernels"]["ops"]) {
    if (op["op"] == "rope_attention_gqa") {  // Llama's attention: the fused decode kernel or its two parts
      found = true;
      EXPECT_EQ(op["coverage"], "kernel");
      EXPECT_NE(op["kernels"].dump().find("launch_attention_decode"), std::string::npos) << op.dump();
    }
  }
  EXPECT_TRUE(found);

  r = run("check --model " + data + "tiny-deepseek-v2 --gpu h200 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["target"]["decode_gemv_activation_parts"], 2);
  EXPECT_EQ(j["kernels"]["runs_on_gpu"], true);
  EXPECT_TRUE(j["kernels"]["ops_without_cuda_kernel"].empty());

  // DeepSeek-V4 (hyper-connections, compressors, attention with sinks) runs on the GPU; V3.2 does not yet.
  r = run("check --model " + data + "tiny-deepseek-v4 --gpu h200 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kernels"]["runs_on_gpu"], true);
  EXPECT_TRUE(j["kernels"]["ops_without_cuda_kernel"].empty());
  EXPECT_EQ(j["target"]["gemm_activations"], "split");  // index-selecting models keep fp32-accurate GEMMs
  r = run("check --model " + data + "tiny-deepseek-v32 --gpu h200 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kernels"]["runs_on_gpu"], true);
  EXPECT_TRUE(j["kernels"]["ops_without_cuda_kernel"].empty());
#endif
  // Text form names the ops too.
  r = run("check --model " + data + "tiny-qwen2 --gpu l40s --prefill-chunk 100");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("attention_gqa"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compute capability 8.9"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("context_chunk_size 100 is not a multiple"), std::string::npos) << r.out;
}

TEST(CheckCli, GpuAutoWithoutAGpuSaysSo) {
  CliRun r = run("check --model " + std::string(DSINFER_TEST_DATA) + "/models/tiny-llama --gpu auto --json");
  if (r.status == 0) GTEST_SKIP() << "a GPU is visible";
  EXPECT_NE(r.err.find("--gpu auto"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("name a target"), std::string::npos) << r.err;
}

TEST(EvalCli, GoldenMarginRuleFlagAndDefaults) {
  const std::string llama = std::string(DSINFER_TEST_DATA) + "/models/tiny-llama";
  CliRun r = run("eval golden --model " + llama + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["margin_rule"], false);  // auto: off on the CPU
  EXPECT_DOUBLE_EQ(j["tolerance"].get<double>(), 1e-4);
  for (const auto& c : j["cases"]) EXPECT_TRUE(c["excused_mismatch"].is_null());
  r = run("eval golden --model " + llama + " --margin-rule on --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["margin_rule"], true);
  r = run("eval golden --model " + llama + " --margin-rule maybe");
  EXPECT_NE(r.status, 0);
}

TEST(EvalCli, GoldenRoutingRuleFlagAndDefaults) {
  const std::string v3 = std::string(DSINFER_TEST_DATA) + "/models/tiny-deepseek-v3";
  CliRun r = run("eval golden --model " + v3 + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["routing_rule"], false);  // auto: off on the CPU
  for (const auto& c : j["cases"]) EXPECT_EQ(c["excused_routing"], false);
  // Forced on with a tolerance no case meets: the rule runs, finds no flip (the CPU is the reference) and
  // keeps the cases failing.
  r = run("eval golden --model " + v3 + " --routing-rule on --tolerance 1e-12 --json");
  EXPECT_EQ(r.status, 1) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["routing_rule"], true);
  for (const auto& c : j["cases"]) {
    EXPECT_EQ(c["routing_flips"]["count"], 0);
    EXPECT_EQ(c["forced_rel_l2"], 0.0);
    EXPECT_EQ(c["excused_routing"], false);
    EXPECT_NE(c["routing_reason"].get<std::string>().find("no routing decision or index selection differs"),
              std::string::npos);
  }
  r = run("eval golden --model " + v3 + " --routing-rule on --tolerance 1e-12");
  EXPECT_NE(r.out.find("routing rule: NOT excused"), std::string::npos) << r.out;
  r = run("eval golden --model " + v3 + " --routing-rule maybe");
  EXPECT_NE(r.status, 0);
}

TEST(EvalCli, BatchAgreementOnTheCpuIsComplete) {
  CliRun r = run("eval batch-agreement --model " + std::string(DSINFER_TEST_DATA) +
                 "/models/tiny-llama --device cpu --prompts 5 --max-tokens 6 --prompt-len 30 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompts"], 5);
  EXPECT_EQ(j["exact"], 5);
  EXPECT_EQ(j["agreement_rate"], 1.0);
  EXPECT_EQ(j["backend"], "cpu");
  r = run("eval batch-agreement --model " + std::string(DSINFER_TEST_DATA) +
          "/models/tiny-llama --device cpu --prompts 3 --max-tokens 4");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("agreement 100.0%"), std::string::npos) << r.out;
}

TEST(DeviceCli, CudaErrorsAreClear) {
  const std::string data = std::string(DSINFER_TEST_DATA) + "/models/";
  CliRun r = run("generate --model " + data + "tiny-llama --prompt hi --cuda-arch sm_70");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--cuda-arch"), std::string::npos) << r.err;
  for (const std::string& cmd :
       {"eval golden --model " + data + "tiny-llama --device cuda",
        "bench --model " + data + "tiny-llama --device cuda --num-prompts 1 --input-len 4 --output-len 2",
        "eval batch-agreement --model " + data + "tiny-llama --device cuda --prompts 1 --max-tokens 1",
        "eval golden --model " + data + "tiny-deepseek-v4 --device cuda"}) {
    r = run(cmd);
    if (r.status == 0) continue;  // a GPU is visible
    EXPECT_TRUE(r.err.find("no CUDA device is visible") != std::string::npos ||
                r.err.find("no CUDA backend") != std::string::npos)
        << cmd << ": " << r.err;
  }
}

}  // namespace
