// CLI tests of the engine paths: `generate --input` (all lines through the engine at once, output in input
// order, equal to one-prompt runs) and `bench` (--json figures, --dummy-weights from config.json alone).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Runs a shell command; returns its stdout and sets *status.
std::string run(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  *status = ::pclose(pipe);
  return out;
}

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

const std::string kModel = std::string(DSINFER_SOURCE_DIR) + "/models/deepseek-v3-tiny-code";

TEST(EngineCli, GenerateInputRunsInInputOrder) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "dsinfer_engine_cli_test";
  std::filesystem::create_directories(dir);
  const std::vector<std::string> prompts = {"def add(a, b):", "import os", "class Tree:", "# read a file"};
  {
    std::ofstream f(dir / "in.jsonl");
    for (size_t i = 0; i < prompts.size(); ++i) {
      nlohmann::json line = {{"prompt", prompts[i]}, {"max_tokens", 8 + 6 * static_cast<int>(i)}};
      f << line.dump() << "\n";
    }
  }
  int status = 0;
  const std::string out = run(std::string(DSINFER_BINARY) + " generate --model " + kModel + " --input " +
                                  (dir / "in.jsonl").string() + " --json",
                              &status);
  ASSERT_EQ(status, 0) << out;
  std::vector<nlohmann::json> got = json_lines(out);
  ASSERT_EQ(got.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string one = run(std::string(DSINFER_BINARY) + " generate --model " + kModel + " --prompt '" +
                                    prompts[i] + "' --json --max-tokens " + std::to_string(8 + 6 * i),
                                &status);
    ASSERT_EQ(status, 0) << one;
    std::vector<nlohmann::json> want = json_lines(one);
    ASSERT_EQ(want.size(), 1u);
    EXPECT_EQ(got[i]["ids"], want[0]["ids"]) << "line " << i;
    EXPECT_EQ(got[i]["text"], want[0]["text"]) << "line " << i;
  }
  std::filesystem::remove_all(dir);
}

TEST(EngineCli, BenchReportsFiguresWithDummyWeights) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "dsinfer_engine_cli_bench";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kModel + "/config.json", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  int status = 0;
  const std::string out = run(std::string(DSINFER_BINARY) + " bench --model " + dir.string() +
                                  " --dummy-weights --num-prompts 6 --input-len 8:40 --output-len 4 --json",
                              &status);
  ASSERT_EQ(status, 0) << out;
  std::vector<nlohmann::json> lines = json_lines(out);
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::json& j = lines[0];
  EXPECT_EQ(j["num_prompts"], 6);
  EXPECT_EQ(j["errors"], 0);
  EXPECT_EQ(j["total_output_tokens"], 24);
  EXPECT_GT(j["output_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["load_s"].get<double>(), 0.0);  // the model's load, apart from the timed run
  for (const char* k : {"ttft_ms", "tpot_ms", "e2e_latency_ms"}) {
    EXPECT_EQ(j[k]["count"], 6) << k;
    EXPECT_LE(j[k]["min"].get<double>(), j[k]["p50"].get<double>()) << k;
    EXPECT_LE(j[k]["p50"].get<double>(), j[k]["p99"].get<double>()) << k;
  }
  EXPECT_GT(j["kv_utilization_peak"].get<double>(), 0.0);
  EXPECT_EQ(j["preemptions"], 0);
  // CUDA graph figures are there on every device (0 on the CPU); the startup ones are part of the total.
  for (const char* k : {"cuda_graph_replays", "cuda_graph_captures", "cuda_graph_captures_at_start",
                        "cuda_graph_capture_failures", "cuda_graph_precapture_context"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_LE(j["cuda_graph_captures_at_start"].get<int64_t>(), j["cuda_graph_captures"].get<int64_t>());
  // The batch-1 decode roofline is a GPU figure (copy bandwidth measured on the device).
  EXPECT_TRUE(j.contains("decode_roofline_batch1"));
  if (!j["decode_roofline_batch1"].is_null()) {
    const nlohmann::json& r = j["decode_roofline_batch1"];
    EXPECT_GT(r["copy_bandwidth_gbs"].get<double>(), 0.0);
    EXPECT_NEAR(r["tpot_ms"].get<double>(),
                r["decode_weight_bytes"].get<double>() / (r["copy_bandwidth_gbs"].get<double>() * 1e6), 1e-9);
  }
  // The GPU it ran on, named as nvidia-smi names it; null on the CPU backend.
  ASSERT_TRUE(j.contains("gpu"));
  if (!j["gpu"].is_null()) {
    EXPECT_EQ(j["gpu"]["uuid"].get<std::string>().rfind("GPU-", 0), 0u);
    EXPECT_EQ(j["gpu"]["pci_bus_id"].get<std::string>().size(), 16u);
    EXPECT_GT(j["gpu"]["multiprocessors"].get<int>(), 0);
  }
  // Without --dummy-weights the same directory has no weights.
  run(std::string(DSINFER_BINARY) + " bench --model " + dir.string() + " --num-prompts 1 2>/dev/null",
      &status);
  EXPECT_NE(status, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
