// Entry point of the DeepSeek-V4 model until its implementation lands (issue 4):
// loading such a checkpoint is a clear error rather than a wrong model.
#include "core/error.h"
#include "model/model.h"
#include "model/weight_loader.h"

namespace dsinfer {

std::unique_ptr<Model> make_deepseek_v4_model(const ModelConfig&, WeightLoader&, Backend&) {
  fail("model_type deepseek_v4 is recognised but its forward pass is not implemented in this build");
}

}  // namespace dsinfer
