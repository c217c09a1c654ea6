// Line reading for JSONL traces, and the readers of traces without text: Mooncake (block
// hashes) and Azure (lengths and times).
#include <cmath>
#include <limits>

#include "replay/arrival_process.h"
#include "replay/trace_readers.h"
#include "util/json_document.h"

namespace kvtier::replay {

Status ForEachJsonLine(std::string_view text, std::string_view source, std::size_t max_line_bytes,
                       const std::function<Status(const nlohmann::json& value, const std::string& where)>& fn) {
  std::size_t pos = 0;
  std::size_t line_no = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const std::string where = std::string(source) + ":" + std::to_string(line_no);
    if (line.size() > max_line_bytes) {
      return Status::InvalidArgument(where + ": line of " + std::to_string(line.size()) +
                                     " bytes is longer than max_line_bytes (" + std::to_string(max_line_bytes) + ")");
    }
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    KVTIER_ASSIGN_OR_RETURN(const nlohmann::json value, ParseLenientJson(line, where));
    if (!value.is_object()) return Status::InvalidArgument(where + ": a line must be a JSON object");
    KVTIER_RETURN_IF_ERROR(fn(value, where));
  }
  return Status::Ok();
}

namespace {

Result<uint64_t> RequireUnsigned(const nlohmann::json& object, std::string_view name, uint64_t max,
                                 const std::string& where) {
  const auto it = object.find(name);
  if (it == object.end()) return Status::InvalidArgument(where + ": missing '" + std::string(name) + "'");
  if (it->is_number_unsigned() && it->get<uint64_t>() <= max) return it->get<uint64_t>();
  if (it->is_number_integer() && it->get<int64_t>() >= 0 && static_cast<uint64_t>(it->get<int64_t>()) <= max) {
    return static_cast<uint64_t>(it->get<int64_t>());
  }
  return Status::InvalidArgument(where + ": '" + std::string(name) + "' must be an integer in [0, " +
                                 std::to_string(max) + "], got " + it->dump().substr(0, 40));
}

}  // namespace

Status ReadMooncake(std::string_view text, std::string_view source, const TraceReadOptions& options,
                    std::vector<TraceRequest>& out) {
  constexpr uint64_t kMax32 = std::numeric_limits<uint32_t>::max();
  return ForEachJsonLine(text, source, options.max_line_bytes, [&](const nlohmann::json& line, const std::string& where) -> Status {
    TraceRequest request;
    // Timestamps are milliseconds; any number is accepted, integral or not.
    const auto ts = line.find("timestamp");
    if (ts == line.end() || !ts->is_number() || !std::isfinite(ts->get<double>()) || ts->get<double>() < 0) {
      return Status::InvalidArgument(where + ": 'timestamp' must be a non-negative number of milliseconds");
    }
    request.arrival_s = ts->get<double>() / 1000.0;
    KVTIER_ASSIGN_OR_RETURN(const uint64_t input, RequireUnsigned(line, "input_length", kMax32, where));
    KVTIER_ASSIGN_OR_RETURN(const uint64_t output, RequireUnsigned(line, "output_length", kMax32, where));
    request.prompt_tokens = static_cast<uint32_t>(input);
    request.output_tokens = static_cast<uint32_t>(output);
    request.block_tokens = options.mooncake_block_tokens;
    const auto hashes = line.find("hash_ids");
    if (hashes == line.end() || !hashes->is_array()) return Status::InvalidArgument(where + ": 'hash_ids' must be a list");
    request.block_hashes.reserve(hashes->size());
    for (std::size_t k = 0; k < hashes->size(); ++k) {
      const nlohmann::json& h = (*hashes)[k];
      if (!h.is_number_unsigned() && !(h.is_number_integer() && h.get<int64_t>() >= 0)) {
        return Status::InvalidArgument(where + ": hash_ids[" + std::to_string(k) + "] is not an unsigned integer");
      }
      request.block_hashes.push_back(h.get<uint64_t>());
    }
    const uint64_t blocks_needed = (input + request.block_tokens - 1) / request.block_tokens;
    if (blocks_needed != request.block_hashes.size()) {
      return Status::InvalidArgument(where + ": " + std::to_string(request.block_hashes.size()) + " hash_ids for " +
                                     std::to_string(input) + " input tokens; expected " + std::to_string(blocks_needed) +
                                     " blocks of " + std::to_string(request.block_tokens) + " tokens");
    }
    // Mooncake's traces name no sessions: each request is one (shared prefixes show in its hashes).
    request.session = "mooncake-" + std::to_string(out.size());
    out.push_back(std::move(request));
    return Status::Ok();
  });
}

Status ReadAzure(std::string_view text, std::string_view source, std::vector<TraceRequest>& out) {
  KVTIER_ASSIGN_OR_RETURN(const std::vector<AzureRow> rows, ParseAzureCsv(text, source));
  for (const AzureRow& row : rows) {
    TraceRequest request;
    request.session = "azure-" + std::to_string(out.size());
    request.arrival_s = row.time_s;
    request.prompt_tokens = row.context_tokens;
    request.output_tokens = row.generated_tokens;
    out.push_back(std::move(request));
  }
  return Status::Ok();
}

}  // namespace kvtier::replay
