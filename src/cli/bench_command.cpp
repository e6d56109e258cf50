// `dsinfer bench`: offline serving benchmark through the batched engine. Submits every prompt at once
// (synthetic random-token prompts of --input-len, or a --dataset), generates --output-len tokens each
// (EOS ignored), and reports throughput, TTFT, time per output token and end-to-end latency (mean, P50,
// P90, P99), KV utilisation and preemptions; --json for machines. --long-fraction mixes in very long prompts
// (TTFT reported per class), --request-rate spreads arrivals (Poisson) and --length-tiers turns the
// scheduler's length tiers on (docs/benchmarks.md, "Length tiers"). On the GPU it also reports the batch-1
// decode roofline: the weight bytes a single-token decode step reads over the copy bandwidth measured in the
// same process, before the engine starts (GPU memory is free then), and the run's mean TPOT against it,
// and the GPU's power, SM clock and clock-event reasons sampled while the requests run (backend/cuda/
// gpu_power.h: a decode that streams weights at full bandwidth can sit at the GPU's power limit, where the SM
// clock drops).
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include "backend/backend_factory.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/progress_bar.h"
#include "dsinfer/engine.h"
#include "engine/bench_metrics.h"
#include "engine/prompt.h"
#include "model/model_config.h"
#include "model/model_size.h"
#include "tokenizer/tokenizer.h"

#ifdef DSINFER_HAVE_CUDA
#include "backend/cuda/copy_bandwidth.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/gpu_power.h"
#endif

namespace dsinfer::cli {

namespace {

struct BenchArgs {
  std::string model;
  bool dummy_weights = false;
  int32_t num_prompts = 64;
  std::string input_len = "128";
  std::string output_len = "128";
  std::string dataset;
  int32_t max_batch_size = 64;
  int32_t cuda_graph_max_batch_size = 256;
  int32_t cuda_graph_precapture_context = 0;
  int32_t max_num_tokens = 2048;
  int32_t chunk_size = 512;
  int32_t kv_block_size = 64;
  int64_t max_kv_tokens = 0;
  bool no_prefix_caching = false;
  bool no_async_scheduling = false;
  std::string device = "auto";
  std::string cuda_arch = "auto";
  uint64_t seed = 0;
  bool json = false;
  double long_fraction = 0.0;  // share of requests with a --long-input-len prompt
  std::string long_input_len = "1500:1800";
  double request_rate = 0.0;  // requests/s, Poisson arrivals (0: all at once)
  bool length_tiers = false;
  int32_t long_prompt_tokens = 1024;
  double long_prefill_share = 0.25;
  int32_t gpu_power_interval_ms = 100;  // 0: no power sampling
  int32_t prompt_logprobs = -1;         // >= 0: every prompt is scored with this many alternatives
  int32_t max_prompt_logprob_rows = 2048;
};

struct BenchRequest {
  std::vector<int32_t> prompt;
  int32_t output_len = 0;
  bool long_prompt = false;
};

using Clock = std::chrono::steady_clock;

struct Outcome {
  Clock::time_point arrival, first_token, finish;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;
  std::string error;
  bool done = false;
  bool long_prompt = false;
};

std::vector<BenchRequest> make_requests(const BenchArgs& a, Engine& engine) {
  const int64_t context = engine.model_config().max_position_embeddings;
  const int32_t vocab = static_cast<int32_t>(engine.model_config().vocab_size);
  const LengthRange out_len = LengthRange::parse(a.output_len, "--output-len");
  std::mt19937_64 rng(a.seed);
  std::vector<BenchRequest> out;
  if (!a.dataset.empty()) {
    std::vector<nlohmann::json> lines = read_json_lines(a.dataset);
    DSI_CHECK(!lines.empty(), a.dataset, ": no requests");
    for (size_t i = 0; static_cast<int32_t>(out.size()) < a.num_prompts; ++i) {
      const nlohmann::json& line = lines[i % lines.size()];
      BenchRequest r;
      if (line.contains("prompt_ids")) {
        r.prompt = line["prompt_ids"].get<std::vector<int32_t>>();
      } else if (line.contains("messages")) {
        r.prompt = encode_chat_prompt(engine.tokenizer(), line["messages"], true);
      } else {
        const char* key = line.contains("prompt") ? "prompt" : "text";
        DSI_CHECK(line.contains(key) && line[key].is_string(), a.dataset, ": line ", i % lines.size() + 1,
                  " needs \"prompt\", \"messages\" or \"prompt_ids\"");
        r.prompt = encode_text_prompt(engine.tokenizer(), line[key].get<std::string>());
      }
      r.output_len = line.contains("max_tokens") ? line["max_tokens"].get<int32_t>() : out_len.sample(rng);
      out.push_back(std::move(r));
    }
  } else {
    const LengthRange in_len = LengthRange::parse(a.input_len, "--input-len");
    const LengthRange long_len = LengthRange::parse(a.long_input_len, "--long-input-len");
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    for (int32_t i = 0; i < a.num_prompts; ++i) {
      BenchRequest r;
      r.long_prompt = a.long_fraction > 0 && coin(rng) < a.long_fraction;
      r.prompt.resize(r.long_prompt ? long_len.sample(rng) : in_len.sample(rng));
      for (int32_t& t : r.prompt) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
      r.output_len = out_len.sample(rng);
      out.push_back(std::move(r));
    }
  }
  for (BenchRequest& r : out) {  // keep prompt + output within the context
    DSI_CHECK(static_cast<int64_t>(r.prompt.size()) < context, "a prompt of ", r.prompt.size(),
              " tokens does not fit the model's context of ", context);
    r.output_len = static_cast<int32_t>(std::min<int64_t>(r.output_len, context - r.prompt.size()));
  }
  return out;
}

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void print_summary(const char* name, const LatencySummary& s, const char* unit) {
  std::printf("%-26s mean %9.2f  p50 %9.2f  p90 %9.2f  p99 %9.2f %s\n", name, s.mean, s.p50, s.p90, s.p99,
              unit);
}

int run_bench(const BenchArgs& a) {
  DSI_CHECK(a.num_prompts > 0, "--num-prompts must be positive");
  EngineConfig config;
  config.model_dir = a.model;
  config.device = a.device;
  config.cuda_arch = a.cuda_arch;
  config.dummy_weights = a.dummy_weights;
  config.max_batch_size = a.max_batch_size;
  config.cuda_graph_max_batch_size = a.cuda_graph_max_batch_size;
  config.cuda_graph_precapture_context = a.cuda_graph_precapture_context;
  config.max_num_tokens = a.max_num_tokens;
  config.context_chunk_size = a.chunk_size;
  config.kv_block_size = a.kv_block_size;
  config.max_tokens_in_paged_kv_cache = a.max_kv_tokens;
  config.enable_prefix_caching = !a.no_prefix_caching;
  config.async_scheduling = !a.no_async_scheduling;
  config.max_queue_length = std::max(config.max_queue_length, a.num_prompts + 1);
  config.max_prompt_logprob_rows = a.max_prompt_logprob_rows;
  config.resilience.length_tiers.enabled = a.length_tiers;
  config.resilience.length_tiers.long_prompt_tokens = a.long_prompt_tokens;
  config.resilience.length_tiers.long_prefill_share = a.long_prefill_share;
  validate(config.resilience);
  // The copy bandwidth of the roofline, measured while the GPU's memory is free: 1 GiB copied 10 times.
  const ModelConfig model = load_model_config(a.model);
  double copy_gbs = 0.0;
  nlohmann::json gpu = nullptr;  // the GPU the engine runs on (device 0), named as nvidia-smi names it
#ifdef DSINFER_HAVE_CUDA
  if (picks_cuda(a.device, model)) {
    copy_gbs = cuda::measure_copy_gbs(int64_t{1} << 30, 10);
    const std::vector<cuda::DeviceInfo> gpus = cuda::query_devices();
    if (!gpus.empty()) {
      const cuda::DeviceInfo& d = gpus[0];
      gpu = {{"index", d.index},
             {"name", d.name},
             {"uuid", d.uuid},
             {"pci_bus_id", d.pci_bus_id},
             {"compute_capability", std::to_string(d.major) + "." + std::to_string(d.minor)},
             {"multiprocessors", d.multiprocessors},
             {"memory_total_bytes", d.total_memory}};
    }
  }
#endif
  DSI_CHECK(a.gpu_power_interval_ms >= 0, "--gpu-power-interval-ms must be 0 (off) or positive");
  std::string power_note;  // why there are no power samples (when the GPU runs and there are none)
#ifdef DSINFER_HAVE_CUDA
  std::unique_ptr<cuda::GpuPowerMonitor> power;
  if (gpu.is_object() && a.gpu_power_interval_ms > 0) {
    if (std::unique_ptr<cuda::GpuPowerSource> source =
            cuda::open_nvml_power_source(gpu["uuid"].get<std::string>(), &power_note))
      power = std::make_unique<cuda::GpuPowerMonitor>(std::move(source),
                                                      std::chrono::milliseconds(a.gpu_power_interval_ms));
  } else if (gpu.is_object()) {
    power_note = "off (--gpu-power-interval-ms 0)";
  }
#endif
  const Clock::time_point load_start = Clock::now();
  std::unique_ptr<Engine> engine = Engine::create(config);
  const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();  // weights, warm-up
  const int64_t graphs_at_start = engine->stats().cuda_graph_captures;  // --cuda-graph-precapture-context
  std::vector<BenchRequest> requests = make_requests(a, *engine);

  std::vector<Outcome> outcomes(requests.size());
  std::mutex mutex;
  std::condition_variable all_done;
  size_t finished = 0;
  ProgressBar progress("bench", static_cast<int64_t>(requests.size()), !a.json && stderr_is_terminal());
#ifdef DSINFER_HAVE_CUDA
  if (power) power->start();  // the window of the timed run
#endif
  const Clock::time_point start = Clock::now();
  std::mt19937_64 arrivals(a.seed + 1);
  std::exponential_distribution<double> gap(a.request_rate > 0 ? a.request_rate : 1.0);
  std::vector<GenerationRequest> at_once;  // no request rate: every request in one arrival
  for (size_t i = 0; i < requests.size(); ++i) {
    outcomes[i].long_prompt = requests[i].long_prompt;
    if (a.request_rate > 0 && i > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(gap(arrivals)));
    GenerationRequest r;
    r.prompt_ids = requests[i].prompt;
    r.sampling.temperature = 0.0f;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = requests[i].output_len;
    r.sampling.prompt_logprobs = a.prompt_logprobs;
    r.on_event = [&, i](const RequestEvent& e) {
      if (!e.finished) return;
      std::lock_guard<std::mutex> lock(mutex);
      Outcome& o = outcomes[i];
      o.arrival = e.arrival;
      o.first_token = e.first_token;
      o.finish = Clock::now();
      o.prompt_tokens = e.usage.prompt_tokens;
      o.completion_tokens = e.usage.completion_tokens;
      o.cached_tokens = e.usage.cached_tokens;
      o.error = e.error;
      o.done = true;
      ++finished;
      progress.advance();
      all_done.notify_all();
    };
    if (a.request_rate > 0)
      engine->submit(std::move(r));
    else
      at_once.push_back(std::move(r));
  }
  // One arrival, so that the engine's first steps (and with them the run's step compositions) do not
  // depend on how fast this loop submits.
  if (!at_once.empty()) engine->submit_all(std::move(at_once));
  // Sample KV utilisation while waiting.
  double util_sum = 0.0;
  int64_t util_samples = 0;
  {
    std::unique_lock<std::mutex> lock(mutex);
    while (finished < requests.size()) {
      all_done.wait_for(lock, std::chrono::milliseconds(20));
      lock.unlock();
      const EngineStats s = engine->stats();
      if (s.running > 0) {
        util_sum += s.kv_utilization;
        ++util_samples;
      }
      lock.lock();
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  nlohmann::json gpu_power = nullptr;
#ifdef DSINFER_HAVE_CUDA
  if (power) gpu_power = power->stop().to_json();
#endif
  progress.finish();
  engine->shutdown();
  const EngineStats stats = engine->stats();

  std::vector<double> ttft, tpot, e2e, short_ttft, long_ttft, long_e2e;
  int64_t in_tokens = 0, out_tokens = 0, cached = 0, errors = 0;
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  for (const Outcome& o : outcomes) {
    if (!o.error.empty()) {
      ++errors;
      continue;
    }
    in_tokens += o.prompt_tokens;
    out_tokens += o.completion_tokens;
    cached += o.cached_tokens;
    ttft.push_back(ms(o.first_token - o.arrival));
    (o.long_prompt ? long_ttft : short_ttft).push_back(ms(o.first_token - o.arrival));
    if (o.long_prompt) long_e2e.push_back(ms(o.finish - o.arrival));
    e2e.push_back(ms(o.finish - o.arrival));
    if (o.completion_tokens > 1) tpot.push_back(ms(o.finish - o.first_token) / (o.completion_tokens - 1));
  }
  const LatencySummary s_ttft = summarize(ttft), s_tpot = summarize(tpot), s_e2e = summarize(e2e);
  const double util_mean = util_samples ? util_sum / static_cast<double>(util_samples) : 0.0;
  const double rps = static_cast<double>(requests.size() - errors) / seconds;
  const double in_tps = static_cast<double>(in_tokens) / seconds;
  const double out_tps = static_cast<double>(out_tokens) / seconds;
  const int64_t decode_bytes = 2 * model_size(model).decode_params;  // bf16 weights
  const bool roofline = copy_gbs > 0.0 && decode_bytes > 0;
  const DecodeRoofline r = roofline ? decode_roofline(decode_bytes, copy_gbs, s_tpot.mean) : DecodeRoofline{};
  if (a.json) {
    nlohmann::json j = {
        {"date", now_utc()},
        {"model", a.model},
        {"dummy_weights", a.dummy_weights},
        {"num_prompts", requests.size()},
        {"errors", errors},
        {"input_len", a.dataset.empty() ? a.input_len : "dataset"},
        {"output_len", a.output_len},
        {"max_batch_size", a.max_batch_size},
        {"cuda_graph_max_batch_size", a.cuda_graph_max_batch_size},
        {"cuda_graph_precapture_context", a.cuda_graph_precapture_context},
        {"max_num_tokens", a.max_num_tokens},
        {"prompt_logprobs", a.prompt_logprobs},
        {"max_prompt_logprob_rows", a.max_prompt_logprob_rows},
        {"duration_s", seconds},
        {"load_s", load_s},
        {"requests_per_s", rps},
        {"input_tokens_per_s", in_tps},
        {"output_tokens_per_s", out_tps},
        {"total_input_tokens", in_tokens},
        {"total_output_tokens", out_tokens},
        {"cached_prompt_tokens", cached},
        {"ttft_ms", s_ttft.to_json()},
        {"tpot_ms", s_tpot.to_json()},
        {"e2e_latency_ms", s_e2e.to_json()},
        {"kv_utilization_mean", util_mean},
        {"kv_utilization_peak", stats.kv_utilization_peak},
        {"kv_blocks_total", stats.kv_blocks_total},
        {"kv_block_size", stats.kv_block_size},
        {"preemptions", stats.preemptions},
        {"steps", stats.steps},
        {"async_scheduling", !a.no_async_scheduling},
        {"fed_tokens", stats.fed_tokens},
        {"dropped_entries", stats.dropped_entries},
        {"cuda_graph_replays", stats.cuda_graph_replays},
        {"cuda_graph_capture_failures", stats.cuda_graph_capture_failures},
        {"cuda_graph_captures", stats.cuda_graph_captures},
        {"cuda_graph_captures_at_start", graphs_at_start},
        {"cuda_graph_capture_s", stats.cuda_graph_capture_seconds},
        {"long_fraction", a.long_fraction},
        {"request_rate", a.request_rate},
        {"length_tiers", a.length_tiers},
        {"short_requests", short_ttft.size()},
        {"long_requests", long_ttft.size()},
        {"short_ttft_ms", summarize(short_ttft).to_json()},
        {"long_ttft_ms", summarize(long_ttft).to_json()},
        {"long_e2e_latency_ms", summarize(long_e2e).to_json()},
        {"decode_roofline_batch1", roofline ? r.to_json() : nlohmann::json(nullptr)},
        {"gpu", gpu},
        {"gpu_power", gpu_power},
    };
    if (!power_note.empty()) j["gpu_power_note"] = power_note;
    std::cout << j.dump() << std::endl;
  } else {
    std::printf(
        "requests: %zu (%lld failed)   duration: %.2f s (model load %.2f s)   steps: %lld (%lld tokens fed "
        "on "
        "the device)\n",
        requests.size(), static_cast<long long>(errors), seconds, load_s, static_cast<long long>(stats.steps),
        static_cast<long long>(stats.fed_tokens));
    std::printf("throughput: %.2f requests/s, %.1f input tokens/s, %.1f output tokens/s\n", rps, in_tps,
                out_tps);
    std::printf("tokens: %lld input (%lld from the prefix cache), %lld output\n",
                static_cast<long long>(in_tokens), static_cast<long long>(cached),
                static_cast<long long>(out_tokens));
    print_summary("time to first token", s_ttft, "ms");
    print_summary("time per output token", s_tpot, "ms");
    print_summary("end-to-end latency", s_e2e, "ms");
    if (gpu.is_object())
      std::printf("GPU: %s, %s, PCI %s\n", gpu["name"].get<std::string>().c_str(),
                  gpu["uuid"].get<std::string>().c_str(), gpu["pci_bus_id"].get<std::string>().c_str());
    if (gpu_power.is_object() && gpu_power["samples"].get<int64_t>() > 0) {
      const nlohmann::json& p = gpu_power;
      std::printf(
          "GPU power: mean %.0f W, max %.0f W (limit %.0f W); SM clock mean %.0f MHz, min %d (max %d); "
          "power-capped in %.0f%% of %lld samples\n",
          p["power_mean_w"].get<double>(), p["power_max_w"].get<double>(), p["power_limit_w"].get<double>(),
          p["sm_clock_mean_mhz"].get<double>(), p["sm_clock_min_mhz"].get<int>(),
          p["sm_clock_max_mhz"].get<int>(), 100.0 * p["power_capped_fraction"].get<double>(),
          static_cast<long long>(p["samples"].get<int64_t>()));
    } else if (!power_note.empty()) {
      std::printf("GPU power: not sampled (%s)\n", power_note.c_str());
    }
    if (roofline)
      std::printf(
          "batch-1 decode roofline: %.2f GB of bf16 weights a token / %.0f GB/s copy bandwidth = %.3f ms "
          "(%.1f%% of the mean TPOT)\n",
          static_cast<double>(r.weight_bytes) / 1e9, r.copy_gbs, r.tpot_ms, 100.0 * r.tpot_fraction);
    if (a.long_fraction > 0) {
      std::printf("length mix: %zu short, %zu long; length tiers %s\n", short_ttft.size(), long_ttft.size(),
                  a.length_tiers ? "on" : "off");
      print_summary("TTFT short prompts", summarize(short_ttft), "ms");
      print_summary("TTFT long prompts", summarize(long_ttft), "ms");
      print_summary("end-to-end long prompts", summarize(long_e2e), "ms");
    }
    std::printf("KV cache: %lld blocks of %d tokens, utilisation mean %.1f%% peak %.1f%%, preemptions %lld\n",
                static_cast<long long>(stats.kv_blocks_total), stats.kv_block_size, 100.0 * util_mean,
                100.0 * stats.kv_utilization_peak, static_cast<long long>(stats.preemptions));
  }
  return errors == 0 ? 0 : 1;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Offline serving benchmark through the batched engine");
  cmd->add_option("--model", a->model, "Model directory (config.json; safetensors unless --dummy-weights)")
      ->required();
  cmd->add_flag("--dummy-weights", a->dummy_weights,
                "Random weights from config.json alone (any model size)");
  cmd->add_option("--num-prompts", a->num_prompts, "Requests to run (64)");
  cmd->add_option("--input-len", a->input_len, "Prompt tokens: N or a uniform range A:B (128)");
  cmd->add_option("--output-len", a->output_len, "Generated tokens: N or a uniform range A:B (128)");
  cmd->add_option("--dataset", a->dataset,
                  "JSON lines with \"prompt\", \"messages\" or \"prompt_ids\" (+ \"max_tokens\") instead of "
                  "random prompts");
  cmd->add_option("--max-batch-size", a->max_batch_size, "Sequences per step (64)");
  cmd->add_option("--cuda-graph-max-batch-size", a->cuda_graph_max_batch_size,
                  "GPU: largest decode batch replayed from a CUDA graph (256; 0: max_batch_size)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--cuda-graph-precapture-context", a->cuda_graph_precapture_context,
                  "GPU: record the decode CUDA graphs for contexts up to this many tokens before the run (0: "
                  "at first use)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--max-num-tokens", a->max_num_tokens, "Tokens per step (2048)");
  cmd->add_option("--context-chunk-size", a->chunk_size, "Prefill chunk tokens (512)");
  cmd->add_option("--kv-block-size", a->kv_block_size, "Tokens per KV block (64)");
  cmd->add_option("--prompt-logprobs", a->prompt_logprobs,
                  "Score every prompt token with this many alternatives, as echo + logprobs does (-1: off)");
  cmd->add_option("--max-prompt-logprob-rows", a->max_prompt_logprob_rows,
                  "Logits rows a step may spend scoring prompts (2048)");
  cmd->add_option("--max-kv-tokens", a->max_kv_tokens, "KV capacity in tokens (default: the byte budget)");
  cmd->add_flag("--no-prefix-caching", a->no_prefix_caching, "Disable prefix caching");
  cmd->add_flag("--no-async-scheduling", a->no_async_scheduling,
                "Wait for each step's sampled tokens before scheduling the next step (GPU)");
  cmd->add_option("--device", a->device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  add_cuda_arch_option(cmd, a->cuda_arch);
  cmd->add_option("--seed", a->seed, "Seed of the synthetic prompts and lengths (0)");
  cmd->add_flag("--json", a->json, "Print one JSON object with every figure");
  cmd->add_option("--gpu-power-interval-ms", a->gpu_power_interval_ms,
                  "GPU runs: sample power, SM clock and clock-event reasons (NVML) this often during the run "
                  "(100; 0: off)");
  cmd->add_option("--long-fraction", a->long_fraction,
                  "Share of requests with a --long-input-len prompt (0)");
  cmd->add_option("--long-input-len", a->long_input_len, "Long prompt tokens: N or A:B (1500:1800)");
  cmd->add_option("--request-rate", a->request_rate, "Requests/s with Poisson arrivals (0: all at once)");
  cmd->add_flag("--length-tiers", a->length_tiers, "Cap long prefills' share of each step (length tiers)");
  cmd->add_option("--long-prompt-tokens", a->long_prompt_tokens, "Tiers: prompts this long are long (1024)");
  cmd->add_option("--long-prefill-share", a->long_prefill_share,
                  "Tiers: most of a step's token budget long prefills may take (0.25)");
  cmd->callback([a]() { run_guarded([&]() { return run_bench(*a); }); });
}

}  // namespace dsinfer::cli
