// kvtier: predictive multi-tier KV-cache management. This binary's subcommands expose the
// library (include/kvtier/); it holds no logic of its own beyond parsing and printing.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kvtier: architecture-aware, predictive multi-tier KV-cache management"};
  app.require_subcommand(1);
  app.set_version_flag("--version", kvtier::cli::VersionText, "Print the version, commit and build features");
  int exit_code = 0;
  kvtier::cli::AddSizeCommand(app, exit_code);
  kvtier::cli::AddInfoCommand(app, exit_code);
  kvtier::cli::AddBenchCommand(app, exit_code);
  kvtier::cli::AddTraceCommand(app, exit_code);
  kvtier::cli::AddReplayCommand(app, exit_code);
  kvtier::cli::AddServeCommand(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse failure is a usage error (2).
    return app.exit(e) == 0 ? 0 : kvtier::cli::kExitUsage;
  }
  return exit_code;
}
