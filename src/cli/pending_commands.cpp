// Placeholder registrations replaced as the generate / tokenize subcommands land.
#include "cli/commands.h"

namespace dsinfer::cli {

void add_generate_command(CLI::App&) {}
void add_tokenize_command(CLI::App&) {}

}  // namespace dsinfer::cli
