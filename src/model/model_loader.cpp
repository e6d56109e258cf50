// load_model: config + checkpoint (or dummy random weights) -> the architecture's Model, with a progress bar
// on a terminal.
#include <unistd.h>

#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "core/progress_bar.h"
#include "model/arch/deepseek.h"
#include "model/arch/deepseek_v32.h"
#include "model/arch/llama.h"
#include "model/model.h"
#include "model/model_size.h"
#include "model/safetensors.h"
#include "model/weight_loader.h"

namespace dsinfer {

std::unique_ptr<Model> make_deepseek_v4_model(const ModelConfig& config, WeightLoader& weights,
                                              Backend& backend);

std::unique_ptr<Model> load_model(const std::string& dir, Backend& backend, const LoadOptions& options) {
  ModelConfig config = load_model_config(dir);
  std::optional<SafetensorsArchive> archive;
  std::optional<WeightLoader> weights_storage;
  bool show = false;
  if (options.dummy_weights) {
    weights_storage.emplace(config, options.dummy_seed);  // random weights: config.json alone
  } else {
    archive.emplace(SafetensorsArchive::open_dir(dir));
    show = options.progress && ::isatty(STDERR_FILENO) && archive->total_bytes() > (64u << 20);
  }
  ProgressBar progress("loading weights", archive ? static_cast<int64_t>(archive->total_bytes()) : 0, show,
                       ProgressUnit::kBytes);
  if (archive) weights_storage.emplace(*archive, config, &progress);
  WeightLoader& weights = *weights_storage;
  if (backend.device() != Device::kCpu) {
    weights.set_backend(&backend);  // weights in the backend's own form (CPU weights stay as read)
    // Refuse before reading gigabytes when the weights cannot fit (the backend holds them as bf16).
    const int64_t free_bytes = backend.free_memory_bytes();
    const int64_t need = model_size(config).bf16_weight_bytes;
    DSI_CHECK(free_bytes < 0 || need <= free_bytes, "the model does not fit: its weights take ", need >> 20,
              " MiB as bf16 and the GPU has ", free_bytes >> 20, " MiB free",
              " (one GPU per model so far; `dsinfer check --model DIR` shows the memory plan)");
  }
  std::unique_ptr<Model> model;
  switch (config.arch) {
    case Arch::kLlama:
    case Arch::kQwen2:
      model = make_llama_model(config, weights, backend);
      break;
    case Arch::kDeepseekV2:
    case Arch::kDeepseekV3:
      model = make_deepseek_model(config, weights, backend);
      break;
    case Arch::kDeepseekV32:
      model = make_deepseek_v32_model(config, weights, backend);
      break;
    case Arch::kDeepseekV4:
      model = make_deepseek_v4_model(config, weights, backend);
      break;
  }
  progress.finish();
  // Multi-token-prediction layers (model.layers.{num_hidden_layers}+ / mtp.*) are not used for decoding.
  std::vector<std::string> ignored = {"mtp."};
  for (int64_t i = 0; i < config.num_nextn_predict_layers; ++i) {
    ignored.push_back("model.layers." + std::to_string(config.num_layers + i) + ".");
  }
  for (const std::string& name : weights.unused(ignored)) log_debug("checkpoint tensor not used: ", name);
  return model;
}

}  // namespace dsinfer
