// `kvtier trace convert` and `kvtier trace stats`: public traces to kvtier's canonical JSONL,
// and their counts (requests, sessions, tokens, distinct blocks).
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "kvtier/tokenizer.h"
#include "kvtier/trace.h"

namespace kvtier::cli {
namespace {

struct TraceArgs {
  std::string input;
  std::string format;
  std::string output;
  std::string tokenizer;
  std::string chat_template = "chatml";
  bool no_output_tokens = false;
  uint32_t block_tokens = 16;
  bool json = false;
  TraceReadOptions read;
};

void AddReadOptions(CLI::App* cmd, TraceArgs& args) {
  cmd->add_option("--input", args.input, "Trace file, or a directory of trace files")->required();
  cmd->add_option("--format", args.format,
                  "canonical, mooncake, sharegpt, lmsys, taubench, sweagent, toolbench or azure")
      ->required();
  cmd->add_option("--tokenizer", args.tokenizer,
                  "Hugging Face tokenizer.json (byte-level BPE) for text traces (default: the approximate tokenizer)");
  cmd->add_option("--chat-template", args.chat_template, "chatml or llama3")->capture_default_str();
  cmd->add_option("--max-requests", args.read.max_requests, "Stop after this many requests (0: all)");
  cmd->add_option("--seed", args.read.seed, "Seed of the arrival process")->capture_default_str();
  cmd->add_option("--session-rate", args.read.arrivals.session_rate_per_s, "New sessions per second (Poisson)")
      ->capture_default_str();
  cmd->add_option("--think-time", args.read.arrivals.mean_think_time_s, "Mean seconds between turns of a session")
      ->capture_default_str();
  cmd->add_option("--azure-shape", args.read.arrivals.azure_shape_csv,
                  "Azure LLM trace CSV whose instants become session starts (instead of Poisson)");
  cmd->add_flag("--no-output-tokens", args.no_output_tokens,
                "Do not record generated token ids (replay then caches prompts only)");
  cmd->add_option("--mooncake-block-tokens", args.read.mooncake_block_tokens, "Tokens per Mooncake hash id")
      ->capture_default_str();
}

Result<Trace> Read(TraceArgs& args, std::unique_ptr<Tokenizer>& tokenizer) {
  KVTIER_ASSIGN_OR_RETURN(const TraceFormat format, ParseTraceFormat(args.format));
  KVTIER_ASSIGN_OR_RETURN(args.read.chat_template, ParseChatTemplate(args.chat_template));
  if (!args.tokenizer.empty()) {
    KVTIER_ASSIGN_OR_RETURN(tokenizer, LoadHfTokenizer(args.tokenizer));
    args.read.tokenizer = tokenizer.get();
  }
  args.read.include_output = !args.no_output_tokens;
  return ReadTrace(args.input, format, args.read);
}

void PrintSkipped(const Trace& trace) {
  for (const std::string& file : trace.metadata.skipped_files) {
    std::cerr << "kvtier trace: skipped " << file << " (no " << trace.metadata.source_format << " requests in it)\n";
  }
}

Status RunConvert(TraceArgs& args) {
  std::unique_ptr<Tokenizer> tokenizer;
  KVTIER_ASSIGN_OR_RETURN(const Trace trace, Read(args, tokenizer));
  PrintSkipped(trace);
  std::ofstream out(args.output, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IoError(args.output + ": cannot open for writing");
  KVTIER_RETURN_IF_ERROR(WriteCanonicalTrace(out, trace).WithContext(args.output));
  const TraceStats stats = ComputeTraceStats(trace, 16);
  std::cout << "wrote " << stats.requests << " requests in " << stats.sessions << " sessions to " << args.output
            << "\n  tokenizer: " << (trace.metadata.tokenizer.empty() ? "none (the trace has no text)" : trace.metadata.tokenizer)
            << "\n  arrivals: " << trace.metadata.arrivals << "\n";
  return Status::Ok();
}

Status RunStats(TraceArgs& args) {
  if (args.block_tokens == 0) return Status::InvalidArgument("--block-tokens must be positive");
  std::unique_ptr<Tokenizer> tokenizer;
  KVTIER_ASSIGN_OR_RETURN(const Trace trace, Read(args, tokenizer));
  PrintSkipped(trace);
  const TraceStats s = ComputeTraceStats(trace, args.block_tokens);
  const double reuse = s.blocks == 0 ? 0 : 1.0 - static_cast<double>(s.unique_blocks) / static_cast<double>(s.blocks);
  if (args.json) {
    const nlohmann::json j = {{"format", trace.metadata.source_format},  {"tokenizer", trace.metadata.tokenizer},
                              {"arrivals", trace.metadata.arrivals},     {"requests", s.requests},
                              {"sessions", s.sessions},                  {"prompt_tokens", s.prompt_tokens},
                              {"output_tokens", s.output_tokens},        {"max_prompt_tokens", s.max_prompt_tokens},
                              {"duration_s", s.duration_s},              {"block_tokens", s.block_tokens},
                              {"blocks", s.blocks},                      {"unique_blocks", s.unique_blocks},
                              {"reused_block_fraction", reuse}};
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return Status::Ok();
  }
  std::cout << "format:          " << trace.metadata.source_format << "\n"
            << "tokenizer:       " << (trace.metadata.tokenizer.empty() ? "none" : trace.metadata.tokenizer) << "\n"
            << "arrivals:        " << trace.metadata.arrivals << "\n"
            << "requests:        " << s.requests << "\n"
            << "sessions:        " << s.sessions << "\n"
            << "prompt tokens:   " << s.prompt_tokens << " (max " << s.max_prompt_tokens << ")\n"
            << "output tokens:   " << s.output_tokens << "\n"
            << "duration:        " << s.duration_s << " s\n";
  if (s.blocks > 0) {
    std::cout << "blocks:          " << s.blocks << " of " << s.block_tokens << " tokens, " << s.unique_blocks
              << " distinct (" << reuse * 100 << "% of prompt blocks are repeats)\n";
  } else {
    std::cout << "blocks:          none (the trace has lengths only)\n";
  }
  return Status::Ok();
}

}  // namespace

void AddTraceCommand(CLI::App& app, int& exit_code) {
  CLI::App* trace = app.add_subcommand("trace", "Read public LLM traces; convert them to kvtier's canonical JSONL");
  trace->require_subcommand(1);

  auto convert_args = std::make_shared<TraceArgs>();
  CLI::App* convert = trace->add_subcommand("convert", "Write a trace as canonical JSONL (docs/traces.md)");
  AddReadOptions(convert, *convert_args);
  convert->add_option("--output", convert_args->output, "Canonical JSONL file to write")->required();
  convert->callback([convert_args, &exit_code]() {
    const Status status = RunConvert(*convert_args);
    if (!status.ok()) {
      std::cerr << "kvtier trace convert: error: " << status.message() << "\n";
      exit_code = kExitError;
    }
  });

  auto stats_args = std::make_shared<TraceArgs>();
  CLI::App* stats = trace->add_subcommand("stats", "Count requests, sessions, tokens and distinct blocks");
  AddReadOptions(stats, *stats_args);
  stats->add_option("--block-tokens", stats_args->block_tokens, "Tokens per block for the distinct-block count")
      ->capture_default_str();
  stats->add_flag("--json", stats_args->json, "Print JSON");
  stats->callback([stats_args, &exit_code]() {
    const Status status = RunStats(*stats_args);
    if (!status.ok()) {
      std::cerr << "kvtier trace stats: error: " << status.message() << "\n";
      exit_code = kExitError;
    }
  });
}

}  // namespace kvtier::cli
