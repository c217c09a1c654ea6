// The per-format readers behind ReadTrace / ParseTraceText (trace.h). Each works on one
// document's text; `source` names it in errors, with ":<line>" for line-based formats.
//
// Thread-safety: pure functions.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvtier/trace.h"
#include "replay/chat_template.h"

namespace kvtier::replay {

// Calls `fn` with each non-blank line of a JSONL text, parsed, and "<source>:<line>".
// Lines longer than `max_line_bytes` and lines that are not JSON are errors.
Status ForEachJsonLine(std::string_view text, std::string_view source, std::size_t max_line_bytes,
                       const std::function<Status(const nlohmann::json& value, const std::string& where)>& fn);

// Text traces, as conversations. A ToolBench file with no answer path (a query list, or an
// answer without train_messages) gives nullopt, so that directory reads can skip it;
// ReadTrace on that single file reports an error.
Result<std::vector<Conversation>> ReadShareGpt(std::string_view text, std::string_view source,
                                               const TraceReadOptions& options);
Result<std::vector<Conversation>> ReadLmsys(std::string_view text, std::string_view source,
                                            const TraceReadOptions& options);
Result<std::vector<Conversation>> ReadTauBench(std::string_view text, std::string_view source);
Result<std::vector<Conversation>> ReadSweAgent(std::string_view text, std::string_view source);
Result<std::optional<Conversation>> ReadToolBench(std::string_view text, std::string_view source);

// Traces with times: requests in file order, arrival_s from the file.
Status ReadMooncake(std::string_view text, std::string_view source, const TraceReadOptions& options,
                    std::vector<TraceRequest>& out);
Status ReadAzure(std::string_view text, std::string_view source, std::vector<TraceRequest>& out);
// The canonical format; its header line, when present, fills `metadata`.
Status ReadCanonical(std::string_view text, std::string_view source, const TraceReadOptions& options,
                     TraceMetadata& metadata, std::vector<TraceRequest>& out);

}  // namespace kvtier::replay
