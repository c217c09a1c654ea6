// Request traces: readers for public LLM traces and kvtier's own canonical JSONL format, the
// input of trace replay. docs/traces.md documents the canonical schema, each source format,
// the chat template, the tokenizers and the arrival process.
//
// Every reader produces TraceRequests: one per model call, in arrival order. Text traces
// (ShareGPT, LMSYS-Chat, tau-bench, SWE-agent, ToolBench) are rendered through a chat template
// and tokenized; each assistant message becomes a request whose prompt is the whole history
// before it, so turn k's prompt plus its output is an exact token prefix of turn k+1's prompt.
// Mooncake traces carry only block hashes; the Azure trace only lengths and times.
//
// Errors name the file and line ("trace.jsonl:12: hash_ids[3] is not an unsigned integer");
// no input makes a reader crash or throw.
//
// Thread-safety: pure functions on their inputs; a Tokenizer may be shared between calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block.h"
#include "kvtier/status.h"

namespace kvtier {

class Tokenizer;

enum class TraceFormat { kCanonical, kMooncake, kShareGpt, kLmsys, kTauBench, kSweAgent, kToolBench, kAzure };
std::string_view TraceFormatName(TraceFormat format);  // "canonical", "mooncake", "sharegpt", ...
Result<TraceFormat> ParseTraceFormat(std::string_view name);

// Tokens [begin, end) of a request's prompt are of block type `type`.
struct TraceTag {
  uint32_t begin = 0;
  uint32_t end = 0;
  BlockType type = BlockType::kUserContext;
  friend bool operator==(const TraceTag&, const TraceTag&) = default;
};

struct TraceRequest {
  std::string session;  // requests of one session share history; turns are in order
  uint32_t turn = 0;    // 0, 1, 2, ... within the session
  double arrival_s = 0; // seconds from the trace's start
  uint32_t prompt_tokens = 0;
  // The prompt's token ids (text traces), or empty when the trace has only hashes or lengths.
  std::vector<uint32_t> tokens;
  // Mooncake: the chained hash ids of the prompt's blocks of `block_tokens` tokens (the last
  // block may be partial); empty otherwise.
  std::vector<uint64_t> block_hashes;
  uint32_t block_tokens = 0;
  uint32_t output_tokens = 0;
  // The generated tokens when the trace knows them (text traces with include_output): the
  // next turn's prompt starts with tokens + output_token_ids.
  std::vector<uint32_t> output_token_ids;
  std::string agent;  // the agent that made the call (SWE-agent's "agent"), or ""
  std::string tool;   // the tool this step calls (from its function call), or ""
  std::vector<TraceTag> tags;  // sorted, disjoint; may leave tokens untagged

  friend bool operator==(const TraceRequest&, const TraceRequest&) = default;
};

enum class ChatTemplate {
  kChatMl,  // "<|im_start|>{role}\n{content}<|im_end|>\n" (Qwen, many others)
  kLlama3,  // "<|begin_of_text|>" then "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>"
};
std::string_view ChatTemplateName(ChatTemplate chat_template);
Result<ChatTemplate> ParseChatTemplate(std::string_view name);

// Arrival times for traces that have none (the text traces): sessions start as a seeded
// Poisson process, or at the instants of an Azure trace; each later turn of a session
// arrives an exponential think time after the one before. Traces with times keep them.
struct ArrivalOptions {
  double session_rate_per_s = 1.0;  // Default: 1 new session per second (Poisson)
  double mean_think_time_s = 5.0;   // Default: 5 s between turns (user or tool time plus decode)
  // An Azure LLM inference trace CSV whose request instants become session starts, in
  // order (wrapping around, shifted by its span, when there are more sessions than rows).
  std::string azure_shape_csv;      // Default: "" (Poisson)

  Status Validate() const;
};

struct TraceReadOptions {
  // Tokenizes text traces. Default: null, the approximate tokenizer (NewApproximateTokenizer()).
  const Tokenizer* tokenizer = nullptr;
  ChatTemplate chat_template = ChatTemplate::kChatMl;  // Default: ChatML
  // Stop after this many requests (whole sessions first, then a cut one). Default: 0 (all).
  std::size_t max_requests = 0;
  uint64_t seed = 1;  // Default: 1 (seeds the arrival process)
  ArrivalOptions arrivals;
  // Record the generated tokens (output_token_ids) of text traces, so that replay caches
  // decode KV as engines do. Default: true.
  bool include_output = true;
  uint32_t mooncake_block_tokens = 512;           // Default: 512 (Mooncake's published traces)
  std::size_t max_line_bytes = 64u << 20;         // Default: 64 MiB per JSONL line
  std::size_t max_file_bytes = std::size_t{1} << 32;  // Default: 4 GiB per file

  Status Validate() const;
};

// What a trace came from: written in the canonical file's header line.
struct TraceMetadata {
  std::string source_format;   // TraceFormatName of the input
  std::string tokenizer;       // Tokenizer::kind(), "" when nothing was tokenized
  std::string chat_template;   // "" when no template was applied
  std::string arrivals;        // "trace", "poisson(rate=..., think=..., seed=...)" or "azure-shape(<file>)"
  std::vector<std::string> skipped_files;  // files of a directory that were not traces of the format
};

struct Trace {
  TraceMetadata metadata;
  std::vector<TraceRequest> requests;  // sorted by arrival_s; turn order kept within sessions
};

// Reads a file, or every file of a directory (sorted by name) with the format's extension:
// .jsonl/.json (canonical, mooncake, sharegpt, lmsys, taubench, toolbench), .traj (sweagent),
// .csv (azure).
Result<Trace> ReadTrace(const std::string& path, TraceFormat format, const TraceReadOptions& options = {});

// The same on a document's text (one file's content); `source` prefixes errors. Pure: the
// entry point for tests and fuzzing. Arrival times are assigned (azure_shape_csv is read).
Result<Trace> ParseTraceText(std::string_view text, std::string_view source, TraceFormat format,
                             const TraceReadOptions& options = {});

// Writes the canonical JSONL: a header line, then one request per line (docs/traces.md).
// A turn whose prompt starts with its session's previous prompt and output is written as
// "extends_previous" plus the new tokens, which keeps the file linear in conversation length.
Status WriteCanonicalTrace(std::ostream& out, const Trace& trace);

// Counts over a trace, for `kvtier trace stats`.
struct TraceStats {
  std::size_t requests = 0;
  std::size_t sessions = 0;
  uint64_t prompt_tokens = 0;
  uint64_t output_tokens = 0;
  uint64_t max_prompt_tokens = 0;
  double duration_s = 0;  // last arrival minus first
  // Full prompt blocks, all and distinct: blocks of `block_tokens` tokens keyed by a chained
  // hash over token ids, or the trace's own block hashes (Mooncake) at its block size.
  uint32_t block_tokens = 0;
  uint64_t blocks = 0;
  uint64_t unique_blocks = 0;
  std::size_t requests_with_tokens = 0;
  std::size_t requests_with_block_hashes = 0;
};
TraceStats ComputeTraceStats(const Trace& trace, uint32_t block_tokens = 16);

}  // namespace kvtier
