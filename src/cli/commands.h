// Registration of the dsinfer subcommands (one file per subcommand) and their shared helpers.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace dsinfer::cli {

// Subcommands set this to their exit status.
int& exit_code();

// Runs `body`, turning dsinfer::Error and other exceptions into "error: ..." on stderr and exit status 1.
void run_guarded(const std::function<int()>& body);

// --cuda-arch auto|sm_90|sm_80 (the CUDA kernel path; sm_80 forces the Ampere path on a Hopper GPU).
CLI::Option* add_cuda_arch_option(CLI::App* cmd, std::string& storage);

void add_bench_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_check_command(CLI::App& app);
void add_serve_command(CLI::App& app);

}  // namespace dsinfer::cli
