// Batched-vs-one-at-a-time agreement: N prompts run greedily one at a time (SequenceRunner, the path of
// `eval golden`, which also gives every step's logits) and then all together through the batched engine
// over the same loaded model;
// the token sequences are compared exactly and under the margin rule (engine/margin_rule.h), with the
// one-at-a-time run as the reference (its top-1 minus top-2 logit at the first differing step). MoE models
// with the routing rule on: the batched run's routing is recorded per sequence and position, and a prompt
// the margin rule does not excuse is judged by engine/agreement_routing.h.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dsinfer/engine.h"
#include "engine/agreement_routing.h"
#include "engine/margin_rule.h"

namespace dsinfer {

struct BatchAgreementOptions {
  EngineConfig engine;      // model_dir, device, cuda_arch, dummy_weights, batch limits, ...
  int32_t prompts = 8;      // how many prompts
  int32_t max_tokens = 16;  // greedy tokens per prompt
  int32_t prompt_len = 64;  // synthetic prompts: lengths uniform in [prompt_len / 2, prompt_len]
  uint64_t seed = 0;        // synthetic prompt ids
  std::string golden;       // golden.safetensors whose input_ids.i come first ("" : MODEL/golden...)
  bool margin_rule = true;  // excuse a first mismatch within bf16 noise
  // MoE models: excuse a prompt whose only cause of difference is routing flips within bf16 noise
  // (engine/agreement_routing.h): "on", "off" or "auto" (on for every device but the CPU). Non-CPU
  // devices force the replay on a CPU reference loaded on first use.
  std::string routing_rule = "auto";
  // Tests: a hook that sees (and may change) the batched run's routing before it is recorded; installed
  // only when the routing rule is active. The engine numbers sequences from 1 in submission order:
  // prompt i is sequence i + 1 in MoeRoutingHook::on_step's plan.
  MoeRoutingHook* batched_routing_hook = nullptr;
};

struct BatchAgreementCase {
  int index = 0;
  std::string source;  // "golden" or "synthetic"
  int64_t prompt_tokens = 0;
  std::vector<int32_t> single;   // one at a time
  std::vector<int32_t> batched;  // all together through the engine
  bool exact = false;
  GreedyMismatch mismatch;  // step -1 when exact
  // The routing rule: run when the sequences differ, the margin rule does not excuse it and the rule is on.
  bool routing_checked = false;
  AgreementRoutingExcuse routing;
  bool excused_routing = false;
};

struct BatchAgreementReport {
  std::string backend;
  bool margin_rule = true;
  bool routing_rule = false;  // on and the model routes through MoeRoutingHook (dense models: false)
  std::vector<BatchAgreementCase> cases;
  int32_t exact = 0;            // identical sequences
  int32_t excused = 0;          // differ only after a first mismatch the margin rule excuses
  int32_t excused_routing = 0;  // differ only because of routing flips the routing rule excuses
  double exact_rate() const;
  double agreement_rate() const;  // (exact + excused + excused_routing) / cases
  nlohmann::json to_json() const;
};

// Synthetic prompts of `count` random ids in [0, vocab), lengths uniform in [max_len / 2, max_len].
std::vector<std::vector<int32_t>> synthetic_prompts(int32_t count, int32_t max_len, int64_t vocab,
                                                    uint64_t seed);

BatchAgreementReport run_batch_agreement(const BatchAgreementOptions& options);

}  // namespace dsinfer
