#include "replay/arrival_process.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>

namespace kvtier::replay {
namespace {

// An exponential with the given mean, by inversion (see the header for why not <random>'s).
double Exponential(std::mt19937_64& rng, double mean) {
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
  return -std::log1p(-u) * mean;
}

// Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (Howard Hinnant's
// days_from_civil).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool ParseFixed(std::string_view text, std::size_t pos, std::size_t len, int64_t min, int64_t max, int64_t& out) {
  if (pos + len > text.size()) return false;
  const char* first = text.data() + pos;
  const auto [ptr, ec] = std::from_chars(first, first + len, out);
  return ec == std::errc() && ptr == first + len && out >= min && out <= max;
}

template <typename T>
bool ParseUnsigned(std::string_view text, T& out) {
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size() && !text.empty();
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

}  // namespace

Result<double> ParseAzureTimestamp(std::string_view text) {
  // YYYY-MM-DD HH:MM:SS[.fraction]
  int64_t y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  const bool ok = text.size() >= 19 && text[4] == '-' && text[7] == '-' && (text[10] == ' ' || text[10] == 'T') &&
                  text[13] == ':' && text[16] == ':' && ParseFixed(text, 0, 4, 1, 9999, y) &&
                  ParseFixed(text, 5, 2, 1, 12, mo) && ParseFixed(text, 8, 2, 1, 31, d) &&
                  ParseFixed(text, 11, 2, 0, 23, h) && ParseFixed(text, 14, 2, 0, 59, mi) &&
                  ParseFixed(text, 17, 2, 0, 60, s);
  if (!ok) return Status::InvalidArgument("timestamp '" + std::string(text) + "' is not YYYY-MM-DD HH:MM:SS[.f]");
  double fraction = 0;
  if (text.size() > 19) {
    if (text[19] != '.' || text.size() == 20 || text.size() > 32) {
      return Status::InvalidArgument("timestamp '" + std::string(text) + "' has a malformed fraction");
    }
    double scale = 0.1;
    for (std::size_t k = 20; k < text.size(); ++k, scale /= 10) {
      if (text[k] < '0' || text[k] > '9') {
        return Status::InvalidArgument("timestamp '" + std::string(text) + "' has a malformed fraction");
      }
      fraction += (text[k] - '0') * scale;
    }
  }
  const int64_t seconds = DaysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
  return static_cast<double>(seconds) + fraction;
}

Result<std::vector<AzureRow>> ParseAzureCsv(std::string_view csv_text, std::string_view source) {
  std::vector<AzureRow> rows;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  double first = 0;
  int timestamp_col = -1, context_col = -1, generated_col = -1;
  while (pos < csv_text.size()) {
    std::size_t end = csv_text.find('\n', pos);
    if (end == std::string_view::npos) end = csv_text.size();
    const std::string_view line = Trim(csv_text.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    const std::string where = std::string(source) + ":" + std::to_string(line_no) + ": ";
    if (line.empty()) continue;
    std::vector<std::string_view> fields;
    for (std::size_t start = 0;;) {
      const std::size_t comma = line.find(',', start);
      fields.push_back(Trim(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start)));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (timestamp_col < 0) {  // the header
      for (std::size_t k = 0; k < fields.size(); ++k) {
        if (fields[k] == "TIMESTAMP") timestamp_col = static_cast<int>(k);
        if (fields[k] == "ContextTokens") context_col = static_cast<int>(k);
        if (fields[k] == "GeneratedTokens") generated_col = static_cast<int>(k);
      }
      if (timestamp_col < 0 || context_col < 0 || generated_col < 0) {
        return Status::InvalidArgument(where + "header must name TIMESTAMP, ContextTokens and GeneratedTokens");
      }
      continue;
    }
    const std::size_t needed = static_cast<std::size_t>(std::max({timestamp_col, context_col, generated_col})) + 1;
    if (fields.size() < needed) return Status::InvalidArgument(where + "expected " + std::to_string(needed) + " fields");
    auto time = ParseAzureTimestamp(fields[static_cast<std::size_t>(timestamp_col)]);
    if (!time.ok()) return time.status().WithContext(where.substr(0, where.size() - 2));
    AzureRow row;
    if (!ParseUnsigned(fields[static_cast<std::size_t>(context_col)], row.context_tokens) ||
        !ParseUnsigned(fields[static_cast<std::size_t>(generated_col)], row.generated_tokens)) {
      return Status::InvalidArgument(where + "ContextTokens and GeneratedTokens must be unsigned 32-bit integers");
    }
    if (rows.empty()) first = *time;
    row.time_s = *time - first;
    if (!rows.empty() && row.time_s < rows.back().time_s) {
      return Status::InvalidArgument(where + "timestamps must not decrease");
    }
    rows.push_back(row);
  }
  if (timestamp_col < 0) return Status::InvalidArgument(std::string(source) + ": empty CSV (no header)");
  return rows;
}

void AssignArrivalTimes(std::vector<TraceRequest>& requests, const ArrivalOptions& options, uint64_t seed,
                        std::span<const double> azure_shape_s) {
  std::mt19937_64 rng(seed);
  const double azure_span = azure_shape_s.empty() ? 0 : azure_shape_s.back();
  std::size_t session_index = 0;
  double poisson_clock = 0;
  for (std::size_t k = 0; k < requests.size(); ++k) {
    const bool new_session = k == 0 || requests[k].session != requests[k - 1].session;
    if (!new_session) {
      requests[k].arrival_s = requests[k - 1].arrival_s + Exponential(rng, options.mean_think_time_s);
      continue;
    }
    if (azure_shape_s.empty()) {
      // The first session starts at 0; later ones after exponential gaps.
      if (session_index > 0) poisson_clock += Exponential(rng, 1.0 / options.session_rate_per_s);
      requests[k].arrival_s = poisson_clock;
    } else {
      // Wrap around, each pass shifted by the shape's span plus its mean gap, so starts increase.
      const std::size_t n = azure_shape_s.size();
      const double pass_shift = azure_span + azure_span / static_cast<double>(n);
      requests[k].arrival_s =
          static_cast<double>(session_index / n) * pass_shift + azure_shape_s[session_index % n];
    }
    ++session_index;
  }
  std::stable_sort(requests.begin(), requests.end(),
                   [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
}

}  // namespace kvtier::replay
