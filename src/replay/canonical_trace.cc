// kvtier's canonical trace JSONL (docs/traces.md): writer and reader.
#include <cmath>
#include <limits>
#include <ostream>
#include <unordered_map>

#include "replay/trace_readers.h"

namespace kvtier {
namespace {

using nlohmann::json;

constexpr int kCanonicalVersion = 1;

Result<BlockType> ParseBlockTypeName(std::string_view name) {
  for (BlockType type : {BlockType::kSystemPrompt, BlockType::kToolContext, BlockType::kUserContext,
                         BlockType::kIntermediateReasoning}) {
    if (BlockTypeName(type) == name) return type;
  }
  return Status::InvalidArgument("unknown block type '" + std::string(name) +
                                 "' (system_prompt, tool_context, user_context, intermediate_reasoning)");
}

// The dump of a line; invalid UTF-8 in strings from the input is replaced, never thrown on.
std::string Dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

bool StartsWith(const std::vector<uint32_t>& tokens, const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  if (a.size() + b.size() > tokens.size()) return false;
  return std::equal(a.begin(), a.end(), tokens.begin()) && std::equal(b.begin(), b.end(), tokens.begin() + static_cast<std::ptrdiff_t>(a.size()));
}

template <typename T>
Result<T> Unsigned(const json& value, const std::string& what) {
  constexpr uint64_t kMax = std::numeric_limits<T>::max();
  if (value.is_number_unsigned() && value.get<uint64_t>() <= kMax) return static_cast<T>(value.get<uint64_t>());
  if (value.is_number_integer() && value.get<int64_t>() >= 0 && static_cast<uint64_t>(value.get<int64_t>()) <= kMax) {
    return static_cast<T>(value.get<int64_t>());
  }
  return Status::InvalidArgument(what + " must be an integer in [0, " + std::to_string(kMax) + "]");
}

template <typename T>
Result<std::vector<T>> UnsignedArray(const json& value, const std::string& what) {
  if (!value.is_array()) return Status::InvalidArgument(what + " must be a list of integers");
  std::vector<T> out;
  out.reserve(value.size());
  for (std::size_t k = 0; k < value.size(); ++k) {
    KVTIER_ASSIGN_OR_RETURN(const T v, Unsigned<T>(value[k], what + "[" + std::to_string(k) + "]"));
    out.push_back(v);
  }
  return out;
}

std::string OptionalString(const json& line, std::string_view name) {
  const auto it = line.find(name);
  return it != line.end() && it->is_string() ? it->get<std::string>() : "";
}

struct SessionState {
  uint32_t last_turn = 0;
  double last_arrival = 0;
  std::size_t last_index = 0;  // into `out`
};

Status ReadRequest(const json& line, const std::string& where, std::unordered_map<std::string, SessionState>& sessions,
                   std::vector<TraceRequest>& out) {
  TraceRequest r;
  const auto field = [&](std::string_view name) -> const json* {
    const auto it = line.find(name);
    return it == line.end() || it->is_null() ? nullptr : &*it;
  };
  const auto error = [&](const std::string& what) { return Status::InvalidArgument(where + ": " + what); };
  const json* session = field("session");
  if (session == nullptr || !session->is_string()) return error("'session' must be a string");
  r.session = session->get<std::string>();
  const json* turn = field("turn");
  if (turn == nullptr) return error("missing 'turn'");
  KVTIER_ASSIGN_OR_RETURN(r.turn, Unsigned<uint32_t>(*turn, where + ": 'turn'"));
  const json* arrival = field("arrival_s");
  if (arrival == nullptr || !arrival->is_number() || !std::isfinite(arrival->get<double>()) ||
      arrival->get<double>() < 0) {
    return error("'arrival_s' must be a non-negative number of seconds");
  }
  r.arrival_s = arrival->get<double>();

  const auto previous = sessions.find(r.session);
  if (previous != sessions.end()) {
    if (r.turn <= previous->second.last_turn) return error("turn " + std::to_string(r.turn) + " of session '" + r.session + "' does not follow turn " + std::to_string(previous->second.last_turn));
    if (r.arrival_s < previous->second.last_arrival) return error("arrival_s is earlier than the session's previous turn");
  }
  if (const json* tokens = field("tokens")) {
    KVTIER_ASSIGN_OR_RETURN(r.tokens, UnsignedArray<uint32_t>(*tokens, where + ": 'tokens'"));
  }
  if (const json* extends = field("extends_previous")) {
    KVTIER_ASSIGN_OR_RETURN(const uint64_t k, Unsigned<uint64_t>(*extends, where + ": 'extends_previous'"));
    if (previous == sessions.end()) return error("'extends_previous' but no earlier turn of session '" + r.session + "'");
    const TraceRequest& p = out[previous->second.last_index];
    std::vector<uint32_t> prefix = p.tokens;
    prefix.insert(prefix.end(), p.output_token_ids.begin(), p.output_token_ids.end());
    if (k > prefix.size()) return error("'extends_previous' is longer than the previous turn's tokens and output");
    prefix.resize(k);
    r.tokens.insert(r.tokens.begin(), prefix.begin(), prefix.end());
  }
  if (const json* hashes = field("block_hashes")) {
    KVTIER_ASSIGN_OR_RETURN(r.block_hashes, UnsignedArray<uint64_t>(*hashes, where + ": 'block_hashes'"));
    const json* block_tokens = field("block_tokens");
    if (block_tokens == nullptr) return error("'block_hashes' needs 'block_tokens'");
    KVTIER_ASSIGN_OR_RETURN(r.block_tokens, Unsigned<uint32_t>(*block_tokens, where + ": 'block_tokens'"));
    if (r.block_tokens == 0) return error("'block_tokens' must be positive");
    if (!r.tokens.empty()) return error("a request has 'tokens' or 'block_hashes', not both");
  }
  if (const json* prompt = field("prompt_tokens")) {
    KVTIER_ASSIGN_OR_RETURN(r.prompt_tokens, Unsigned<uint32_t>(*prompt, where + ": 'prompt_tokens'"));
    if (!r.tokens.empty() && r.prompt_tokens != r.tokens.size()) {
      return error("'prompt_tokens' is " + std::to_string(r.prompt_tokens) + " but there are " + std::to_string(r.tokens.size()) + " tokens");
    }
  } else {
    if (r.tokens.size() > std::numeric_limits<uint32_t>::max()) return error("too many tokens");
    r.prompt_tokens = static_cast<uint32_t>(r.tokens.size());
  }
  if (!r.block_hashes.empty() &&
      (uint64_t{r.prompt_tokens} + r.block_tokens - 1) / r.block_tokens != r.block_hashes.size()) {
    return error("'block_hashes' must cover 'prompt_tokens' in blocks of 'block_tokens' (the last may be partial)");
  }
  if (const json* ids = field("output_token_ids")) {
    KVTIER_ASSIGN_OR_RETURN(r.output_token_ids, UnsignedArray<uint32_t>(*ids, where + ": 'output_token_ids'"));
  }
  if (const json* output = field("output_tokens")) {
    KVTIER_ASSIGN_OR_RETURN(r.output_tokens, Unsigned<uint32_t>(*output, where + ": 'output_tokens'"));
  } else {
    r.output_tokens = static_cast<uint32_t>(std::min<std::size_t>(r.output_token_ids.size(), std::numeric_limits<uint32_t>::max()));
  }
  if (!r.output_token_ids.empty() && r.output_token_ids.size() != r.output_tokens) {
    return error("'output_tokens' must equal the length of 'output_token_ids'");
  }
  r.agent = OptionalString(line, "agent");
  r.tool = OptionalString(line, "tool");
  if (const json* tags = field("tags")) {
    if (!tags->is_array()) return error("'tags' must be a list of [begin, end, type]");
    for (std::size_t k = 0; k < tags->size(); ++k) {
      const json& t = (*tags)[k];
      const std::string what = where + ": tags[" + std::to_string(k) + "]";
      if (!t.is_array() || t.size() != 3 || !t[2].is_string()) return Status::InvalidArgument(what + " must be [begin, end, type]");
      TraceTag tag;
      KVTIER_ASSIGN_OR_RETURN(tag.begin, Unsigned<uint32_t>(t[0], what + " begin"));
      KVTIER_ASSIGN_OR_RETURN(tag.end, Unsigned<uint32_t>(t[1], what + " end"));
      auto type = ParseBlockTypeName(t[2].get<std::string>());
      if (!type.ok()) return type.status().WithContext(what);
      tag.type = *type;
      const uint32_t floor = r.tags.empty() ? 0 : r.tags.back().end;
      if (tag.begin < floor || tag.end <= tag.begin || tag.end > r.prompt_tokens) {
        return Status::InvalidArgument(what + " must be a non-empty range within the prompt, after the previous tag");
      }
      r.tags.push_back(tag);
    }
  }
  sessions[r.session] = {r.turn, r.arrival_s, out.size()};
  out.push_back(std::move(r));
  return Status::Ok();
}

}  // namespace

namespace replay {

Status ReadCanonical(std::string_view text, std::string_view source, const TraceReadOptions& options,
                     TraceMetadata& metadata, std::vector<TraceRequest>& out) {
  std::unordered_map<std::string, SessionState> sessions;
  bool first = true;
  return ForEachJsonLine(text, source, options.max_line_bytes, [&](const json& line, const std::string& where) -> Status {
    const bool is_header = line.contains("kvtier_trace");
    if (is_header) {
      if (!first) return Status::InvalidArgument(where + ": the 'kvtier_trace' header must be the first line");
      const json& version = line["kvtier_trace"];
      if (!version.is_number_integer() || version.get<int64_t>() != kCanonicalVersion) {
        return Status::Unsupported(where + ": kvtier_trace version " + version.dump() + "; this build reads version " +
                                   std::to_string(kCanonicalVersion));
      }
      metadata.source_format = OptionalString(line, "source_format");
      metadata.tokenizer = OptionalString(line, "tokenizer");
      metadata.chat_template = OptionalString(line, "chat_template");
      metadata.arrivals = OptionalString(line, "arrivals");
      first = false;
      return Status::Ok();
    }
    first = false;
    return ReadRequest(line, where, sessions, out);
  });
}

}  // namespace replay

Status WriteCanonicalTrace(std::ostream& out, const Trace& trace) {
  json header = {{"kvtier_trace", kCanonicalVersion},
                 {"source_format", trace.metadata.source_format},
                 {"tokenizer", trace.metadata.tokenizer},
                 {"chat_template", trace.metadata.chat_template},
                 {"arrivals", trace.metadata.arrivals}};
  out << Dump(header) << '\n';
  std::unordered_map<std::string, const TraceRequest*> last_of_session;
  for (const TraceRequest& r : trace.requests) {
    json line = {{"session", r.session}, {"turn", r.turn}, {"arrival_s", r.arrival_s}, {"prompt_tokens", r.prompt_tokens}};
    const auto previous = last_of_session.find(r.session);
    std::size_t shared = 0;
    if (previous != last_of_session.end()) {
      const TraceRequest& p = *previous->second;
      if (!p.tokens.empty() && StartsWith(r.tokens, p.tokens, p.output_token_ids)) {
        shared = p.tokens.size() + p.output_token_ids.size();
        line["extends_previous"] = shared;
      }
    }
    if (!r.tokens.empty()) {
      line["tokens"] = std::vector<uint32_t>(r.tokens.begin() + static_cast<std::ptrdiff_t>(shared), r.tokens.end());
    }
    if (!r.block_hashes.empty()) {
      line["block_hashes"] = r.block_hashes;
      line["block_tokens"] = r.block_tokens;
    }
    line["output_tokens"] = r.output_tokens;
    if (!r.output_token_ids.empty()) line["output_token_ids"] = r.output_token_ids;
    if (!r.agent.empty()) line["agent"] = r.agent;
    if (!r.tool.empty()) line["tool"] = r.tool;
    if (!r.tags.empty()) {
      json tags = json::array();
      for (const TraceTag& t : r.tags) tags.push_back({t.begin, t.end, BlockTypeName(t.type)});
      line["tags"] = std::move(tags);
    }
    out << Dump(line) << '\n';
    last_of_session[r.session] = &r;
  }
  out.flush();
  if (!out) return Status::IoError("writing the canonical trace failed");
  return Status::Ok();
}

}  // namespace kvtier
