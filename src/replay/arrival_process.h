// Arrival times for traces without them (trace.h's ArrivalOptions).
//
// Session starts: a Poisson process of rate session_rate_per_s (exponential gaps), or the
// request instants of an Azure trace. Turns: each later turn of a session arrives an
// exponential think time (mean mean_think_time_s) after the turn before. Exponentials are
// drawn by inversion, -ln(1 - u) * mean, from std::mt19937_64 with u built from its top 53
// bits: both are fixed by the C++ standard, so a seed gives the same times on every platform
// (std::exponential_distribution is not specified bit for bit).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/trace.h"

namespace kvtier::replay {

// Assigns arrival_s to `requests`, which hold whole sessions with their turns in order, and
// sorts them by arrival (stable, so equal times keep file order). `azure_shape_s`, when not
// empty, replaces the Poisson session starts (seconds from the first instant, ascending).
void AssignArrivalTimes(std::vector<TraceRequest>& requests, const ArrivalOptions& options, uint64_t seed,
                        std::span<const double> azure_shape_s);

// "2023-11-16 18:15:46.6805900" as seconds since 1970-01-01 UTC, or an error.
Result<double> ParseAzureTimestamp(std::string_view text);

// One row of an Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens).
struct AzureRow {
  double time_s = 0;  // seconds from the first row
  uint32_t context_tokens = 0;
  uint32_t generated_tokens = 0;
};

// Parses the CSV (header line required, rows in time order). Errors name the file and line.
Result<std::vector<AzureRow>> ParseAzureCsv(std::string_view csv_text, std::string_view source);

}  // namespace kvtier::replay
