// ReadTrace / ParseTraceText (trace.h): format names, options, files and directories, and
// the steps every format shares (sessions, limits, arrival times).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kvtier/tokenizer.h"
#include "replay/arrival_process.h"
#include "replay/chat_template.h"
#include "replay/trace_readers.h"
#include "util/json_document.h"

namespace kvtier {
namespace {

struct FormatInfo {
  TraceFormat format;
  std::string_view name;
  std::string_view extensions;  // space-separated, for directory reads
};

constexpr FormatInfo kFormats[] = {
    {TraceFormat::kCanonical, "canonical", ".jsonl"},     {TraceFormat::kMooncake, "mooncake", ".jsonl"},
    {TraceFormat::kShareGpt, "sharegpt", ".jsonl .json"}, {TraceFormat::kLmsys, "lmsys", ".jsonl .json"},
    {TraceFormat::kTauBench, "taubench", ".json"},        {TraceFormat::kSweAgent, "sweagent", ".traj"},
    {TraceFormat::kToolBench, "toolbench", ".json"},      {TraceFormat::kAzure, "azure", ".csv"},
};

const FormatInfo& Info(TraceFormat format) {
  for (const FormatInfo& info : kFormats) {
    if (info.format == format) return info;
  }
  return kFormats[0];
}

bool IsTextFormat(TraceFormat f) {
  return f == TraceFormat::kShareGpt || f == TraceFormat::kLmsys || f == TraceFormat::kTauBench ||
         f == TraceFormat::kSweAgent || f == TraceFormat::kToolBench;
}

std::string FormatDouble(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Reads one document's requests (no arrival times for text formats yet) into `out`.
// `skipped` is set when the document is not a trace of the format (ToolBench query lists).
Status ParseDocument(std::string_view text, std::string_view source, TraceFormat format,
                     const TraceReadOptions& options, const replay::ChatRenderer* renderer, Trace& trace,
                     bool& skipped) {
  skipped = false;
  std::vector<replay::Conversation> conversations;
  switch (format) {
    case TraceFormat::kCanonical:
      return replay::ReadCanonical(text, source, options, trace.metadata, trace.requests);
    case TraceFormat::kMooncake:
      return replay::ReadMooncake(text, source, options, trace.requests);
    case TraceFormat::kAzure:
      return replay::ReadAzure(text, source, trace.requests);
    case TraceFormat::kShareGpt: {
      KVTIER_ASSIGN_OR_RETURN(conversations, replay::ReadShareGpt(text, source, options));
      break;
    }
    case TraceFormat::kLmsys: {
      KVTIER_ASSIGN_OR_RETURN(conversations, replay::ReadLmsys(text, source, options));
      break;
    }
    case TraceFormat::kTauBench: {
      KVTIER_ASSIGN_OR_RETURN(conversations, replay::ReadTauBench(text, source));
      break;
    }
    case TraceFormat::kSweAgent: {
      KVTIER_ASSIGN_OR_RETURN(conversations, replay::ReadSweAgent(text, source));
      break;
    }
    case TraceFormat::kToolBench: {
      KVTIER_ASSIGN_OR_RETURN(auto conversation, replay::ReadToolBench(text, source));
      if (!conversation) {
        skipped = true;
        return Status::Ok();
      }
      conversations.push_back(std::move(*conversation));
      break;
    }
  }
  for (const replay::Conversation& conversation : conversations) {
    if (options.max_requests != 0 && trace.requests.size() >= options.max_requests) break;
    renderer->AppendRequests(conversation, options.include_output, options.max_requests, trace.requests);
  }
  return Status::Ok();
}

// Gives every contiguous run of one session a distinct name ("<name>#2" for a repeat), so
// that two conversations with one id never merge into one session.
void MakeSessionsDistinct(std::vector<TraceRequest>& requests) {
  std::unordered_map<std::string, int> seen;
  std::string current_original;
  std::string current_name;
  for (std::size_t k = 0; k < requests.size(); ++k) {
    if (k == 0 || requests[k].session != current_original) {
      current_original = requests[k].session;
      const int n = ++seen[current_original];
      current_name = n == 1 ? current_original : current_original + "#" + std::to_string(n);
    }
    requests[k].session = current_name;
  }
}

// The steps after parsing: limits, session names, arrival times, metadata.
Status Finish(TraceFormat format, const TraceReadOptions& options, const Tokenizer* tokenizer, Trace& trace) {
  if (options.max_requests != 0 && trace.requests.size() > options.max_requests) {
    trace.requests.resize(options.max_requests);
  }
  if (format == TraceFormat::kCanonical) {
    std::stable_sort(trace.requests.begin(), trace.requests.end(),
                     [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
    return Status::Ok();
  }
  trace.metadata.source_format = std::string(TraceFormatName(format));
  if (!IsTextFormat(format)) {
    trace.metadata.arrivals = "trace";
    return Status::Ok();
  }
  MakeSessionsDistinct(trace.requests);
  trace.metadata.tokenizer = std::string(tokenizer->kind());
  trace.metadata.chat_template = std::string(ChatTemplateName(options.chat_template));
  std::vector<double> shape;
  if (!options.arrivals.azure_shape_csv.empty()) {
    KVTIER_ASSIGN_OR_RETURN(const std::string csv, ReadTextFile(options.arrivals.azure_shape_csv));
    KVTIER_ASSIGN_OR_RETURN(const auto rows, replay::ParseAzureCsv(csv, options.arrivals.azure_shape_csv));
    if (rows.empty()) return Status::InvalidArgument(options.arrivals.azure_shape_csv + ": no rows for an arrival shape");
    for (const replay::AzureRow& row : rows) shape.push_back(row.time_s);
    trace.metadata.arrivals = "azure-shape(" + options.arrivals.azure_shape_csv +
                              ", think=" + FormatDouble(options.arrivals.mean_think_time_s) +
                              "s, seed=" + std::to_string(options.seed) + ")";
  } else {
    trace.metadata.arrivals = "poisson(rate=" + FormatDouble(options.arrivals.session_rate_per_s) +
                              "/s, think=" + FormatDouble(options.arrivals.mean_think_time_s) +
                              "s, seed=" + std::to_string(options.seed) + ")";
  }
  replay::AssignArrivalTimes(trace.requests, options.arrivals, options.seed, shape);
  return Status::Ok();
}

// The tokenizer to use: the caller's, or the approximate one (owned by `holder`).
Result<const Tokenizer*> PickTokenizer(const TraceReadOptions& options, std::unique_ptr<Tokenizer>& holder) {
  if (options.tokenizer != nullptr) return options.tokenizer;
  KVTIER_ASSIGN_OR_RETURN(holder, NewApproximateTokenizer());
  return holder.get();
}

Result<std::string> ReadBounded(const std::filesystem::path& path, std::size_t max_bytes) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return Status::NotFound(path.string() + ": " + ec.message());
  if (size > max_bytes) {
    return Status::InvalidArgument(path.string() + ": " + std::to_string(size) + " bytes is more than max_file_bytes (" +
                                   std::to_string(max_bytes) + ")");
  }
  return ReadTextFile(path.string());
}

bool HasExtension(const std::filesystem::path& path, std::string_view extensions) {
  const std::string ext = path.extension().string();
  if (ext.empty()) return false;
  std::string_view rest = extensions;
  while (!rest.empty()) {
    const std::size_t space = rest.find(' ');
    if (rest.substr(0, space) == ext) return true;
    if (space == std::string_view::npos) break;
    rest.remove_prefix(space + 1);
  }
  return false;
}

}  // namespace

std::string_view TraceFormatName(TraceFormat format) { return Info(format).name; }

Result<TraceFormat> ParseTraceFormat(std::string_view name) {
  std::string names;
  for (const FormatInfo& info : kFormats) {
    if (info.name == name) return info.format;
    names += names.empty() ? "" : ", ";
    names += info.name;
  }
  return Status::InvalidArgument("unknown trace format '" + std::string(name) + "' (one of: " + names + ")");
}

std::string_view ChatTemplateName(ChatTemplate chat_template) {
  return chat_template == ChatTemplate::kChatMl ? "chatml" : "llama3";
}

Result<ChatTemplate> ParseChatTemplate(std::string_view name) {
  if (name == "chatml") return ChatTemplate::kChatMl;
  if (name == "llama3") return ChatTemplate::kLlama3;
  return Status::InvalidArgument("unknown chat template '" + std::string(name) + "' (chatml or llama3)");
}

Status ArrivalOptions::Validate() const {
  if (!(session_rate_per_s > 0) || !std::isfinite(session_rate_per_s)) {
    return Status::InvalidArgument("arrivals: session_rate_per_s must be a positive number");
  }
  if (!(mean_think_time_s >= 0) || !std::isfinite(mean_think_time_s)) {
    return Status::InvalidArgument("arrivals: mean_think_time_s must be >= 0");
  }
  return Status::Ok();
}

Status TraceReadOptions::Validate() const {
  KVTIER_RETURN_IF_ERROR(arrivals.Validate());
  if (mooncake_block_tokens == 0) return Status::InvalidArgument("trace: mooncake_block_tokens must be positive");
  if (max_line_bytes == 0) return Status::InvalidArgument("trace: max_line_bytes must be positive");
  if (max_file_bytes == 0) return Status::InvalidArgument("trace: max_file_bytes must be positive");
  return Status::Ok();
}

Result<Trace> ParseTraceText(std::string_view text, std::string_view source, TraceFormat format,
                             const TraceReadOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  if (text.size() > options.max_file_bytes) {
    return Status::InvalidArgument(std::string(source) + ": more than max_file_bytes (" +
                                   std::to_string(options.max_file_bytes) + ")");
  }
  std::unique_ptr<Tokenizer> holder;
  KVTIER_ASSIGN_OR_RETURN(const Tokenizer* tokenizer, PickTokenizer(options, holder));
  const replay::ChatRenderer renderer(*tokenizer, options.chat_template);
  Trace trace;
  bool skipped = false;
  // The readers check every type before access; this only keeps a missed check in them from
  // throwing out of the API (nlohmann reports a wrong type by exception).
  try {
    KVTIER_RETURN_IF_ERROR(ParseDocument(text, source, format, options, &renderer, trace, skipped));
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string(source) + ": unexpected JSON shape (" + e.what() + ")");
  }
  if (skipped) {
    return Status::InvalidArgument(std::string(source) + ": not a " + std::string(TraceFormatName(format)) +
                                   " trace with messages (no answer_generation.train_messages)");
  }
  KVTIER_RETURN_IF_ERROR(Finish(format, options, tokenizer, trace));
  return trace;
}

Result<Trace> ReadTrace(const std::string& path, TraceFormat format, const TraceReadOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    KVTIER_ASSIGN_OR_RETURN(const std::string text, ReadBounded(path, options.max_file_bytes));
    return ParseTraceText(text, path, format, options);
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(path, ec)) {
    if (entry.is_regular_file() && HasExtension(entry.path(), Info(format).extensions)) files.push_back(entry.path());
  }
  if (ec) return Status::IoError(path + ": " + ec.message());
  if (files.empty()) {
    return Status::NotFound(path + ": no files ending in " + std::string(Info(format).extensions) + " for format " +
                            std::string(TraceFormatName(format)));
  }
  std::sort(files.begin(), files.end());
  std::unique_ptr<Tokenizer> holder;
  KVTIER_ASSIGN_OR_RETURN(const Tokenizer* tokenizer, PickTokenizer(options, holder));
  const replay::ChatRenderer renderer(*tokenizer, options.chat_template);
  Trace trace;
  for (const fs::path& file : files) {
    if (options.max_requests != 0 && trace.requests.size() >= options.max_requests) break;
    KVTIER_ASSIGN_OR_RETURN(const std::string text, ReadBounded(file, options.max_file_bytes));
    bool skipped = false;
    try {
      KVTIER_RETURN_IF_ERROR(ParseDocument(text, file.string(), format, options, &renderer, trace, skipped));
    } catch (const nlohmann::json::exception& e) {
      return Status::InvalidArgument(file.string() + ": unexpected JSON shape (" + e.what() + ")");
    }
    if (skipped) trace.metadata.skipped_files.push_back(file.filename().string());
  }
  KVTIER_RETURN_IF_ERROR(Finish(format, options, tokenizer, trace));
  return trace;
}

}  // namespace kvtier
