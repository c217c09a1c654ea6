// Subcommands of the `kvtier` executable. Each registers its options on the CLI11 app and
// returns the callback's exit code through `exit_code`.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace kvtier::cli {

// Exit codes: 0 success, 1 an error reported by kvtier, 2 a usage error (CLI11's).
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

void AddSizeCommand(CLI::App& app, int& exit_code);
void AddInfoCommand(CLI::App& app, int& exit_code);
void AddBenchCommand(CLI::App& app, int& exit_code);
void AddTraceCommand(CLI::App& app, int& exit_code);
void AddReplayCommand(CLI::App& app, int& exit_code);
void AddServeCommand(CLI::App& app, int& exit_code);

// What `kvtier --version` prints: version, commit, build type and optional features.
std::string VersionText();

}  // namespace kvtier::cli
