// dsinfer command-line entry point: parses the subcommand and dispatches to one file per subcommand.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace dsinfer::cli {

int& exit_code() {
  static int code = 0;
  return code;
}

void run_guarded(const std::function<int()>& body) {
  try {
    exit_code() = body();
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    exit_code() = 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    exit_code() = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    exit_code() = 1;
  }
}

CLI::Option* add_cuda_arch_option(CLI::App* cmd, std::string& storage) {
  return cmd
      ->add_option(
          "--cuda-arch", storage,
          "CUDA kernel path: auto (from the GPU; default $DSINFER_CUDA_ARCH), sm_90, or sm_80 (forces "
          "the Ampere path, also on a Hopper GPU)")
      ->check(CLI::IsMember({"auto", "sm_90", "sm_80"}));
}

}  // namespace dsinfer::cli

int main(int argc, char** argv) {
  CLI::App app{"dsinfer: inference engine and OpenAI-compatible server for DeepSeek models"};
  app.set_version_flag("--version", "dsinfer 0.1.0");
  std::string log_level;
  app.add_option("--log-level", log_level, "error, warn, info or debug (default: $DSINFER_LOG or warn)");
  app.require_subcommand(1);
  dsinfer::cli::add_bench_command(app);
  dsinfer::cli::add_eval_command(app);
  dsinfer::cli::add_generate_command(app);
  dsinfer::cli::add_tokenize_command(app);
  dsinfer::cli::add_info_command(app);
  dsinfer::cli::add_check_command(app);
  dsinfer::cli::add_serve_command(app);
  app.parse_complete_callback([&]() {
    if (!log_level.empty()) {
      try {
        dsinfer::set_log_level(dsinfer::parse_log_level(log_level));
      } catch (const dsinfer::Error& e) {
        throw CLI::ValidationError("--log-level", e.what());
      }
    }
  });
  CLI11_PARSE(app, argc, argv);
  return dsinfer::cli::exit_code();
}
