// The text requests the engine tests run through deepseek-v3-tiny-code and its tokenizer: greedy, stop
// strings (held back across deltas), seeded top-p sampling, penalties, a long run into EOS or the token
// limit.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "dsinfer/engine.h"

namespace dsinfer {

inline std::vector<std::pair<std::string, SamplingParams>> tiny_code_requests() {
  std::vector<std::pair<std::string, SamplingParams>> cases;  // (prompt, sampling)
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_tokens = 40;
  cases.push_back({"def fibonacci(n):", greedy});
  SamplingParams stop = greedy;
  stop.stop = {"\n", "return"};
  cases.push_back({"class Stack:\n    def __init__(self):", stop});
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.top_p = 0.9f;
  sampled.seed = 11;
  sampled.max_tokens = 30;
  cases.push_back({"import numpy as np\n", sampled});
  SamplingParams penalised = sampled;
  penalised.repetition_penalty = 1.3f;
  penalised.frequency_penalty = 0.5f;
  penalised.seed = 12;
  cases.push_back({"for i in range(10):", penalised});
  SamplingParams long_run = greedy;  // runs into EOS or the token limit
  long_run.max_tokens = 300;
  cases.push_back({"# utilities\n", long_run});
  SamplingParams stop2 = greedy;
  stop2.stop = {"(", ":"};
  cases.push_back({"import os\n", stop2});
  return cases;
}

}  // namespace dsinfer
