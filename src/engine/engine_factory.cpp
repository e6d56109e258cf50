// Engine::create: backend, model (real or dummy weights) and tokenizer for an EngineConfig.
#include <filesystem>

#include "backend/backend_factory.h"
#include "engine/engine_impl.h"
#include "model/model.h"

namespace dsinfer {

std::unique_ptr<Engine> Engine::create(const EngineConfig& config) {
  std::unique_ptr<Backend> backend = make_backend(config.device, config.model_dir, config.cuda_arch);
  LoadOptions options;
  options.dummy_weights = config.dummy_weights;
  std::unique_ptr<Model> model = load_model(config.model_dir, *backend, options);
  std::optional<Tokenizer> tokenizer;
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(config.model_dir) / "tokenizer.json") ||
      fs::exists(fs::path(config.model_dir) / "tokenizer.json.gz")) {
    tokenizer = Tokenizer::load(config.model_dir);
  }
  return make_engine(config, std::move(backend), std::move(model), std::move(tokenizer));
}

}  // namespace dsinfer
