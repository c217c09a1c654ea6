#include "scaling_projection.h"

#include <algorithm>

#include "kvtier/server.h"

namespace kvtier::bench {
namespace {

constexpr int kProjectedCores = 64;

double NumberOr(const nlohmann::json& entry, const char* field, double otherwise) {
  if (field == nullptr) return otherwise;
  const auto it = entry.find(field);
  return it != entry.end() && it->is_number() ? it->get<double>() : otherwise;
}

}  // namespace

nlohmann::json ProjectScaling(const OperationCost& cost, int cores) {
  if (!(cost.cpu_us > 0) || cores <= 0) return nullptr;
  const uint32_t loops = ServerOptions::DefaultEventLoops(static_cast<uint32_t>(cores));
  double ops_per_s = static_cast<double>(cores) * 1e6 / cost.cpu_us;
  const char* bound = "cpu";
  // A bound replaces the CPU's only when strictly lower; one not measured (0) binds nothing.
  const auto consider = [&](double rate, const char* name) {
    if (rate < ops_per_s) {
      ops_per_s = rate;
      bound = name;
    }
  };
  if (cost.lock_hold_us > 0) consider(1e6 / cost.lock_hold_us, "metadata lock");
  if (cost.tier_lock_hold_us > 0) consider(1e6 / cost.tier_lock_hold_us, "tier lock");
  if (cost.index_lock_hold_us > 0) consider(1e6 / cost.index_lock_hold_us, "index lock");
  if (cost.event_loop_cpu_us > 0) consider(static_cast<double>(loops) * 1e6 / cost.event_loop_cpu_us, "event loops");
  return {{"cores", cores}, {"event_loops", loops}, {"ops_per_s", ops_per_s}, {"bound", bound}};
}

void AddLockFields(const LockReadings& before, const LockReadings& after, uint64_t ops, const char* cpu_field,
                   const char* event_loop_cpu_field, nlohmann::json& entry) {
  if (ops == 0) return;
  const LockProfile& metadata_before = before.metadata;
  const LockProfile& metadata_after = after.metadata;
  const double n = static_cast<double>(ops);
  const double hold_us = (metadata_after.exclusive_hold_seconds - metadata_before.exclusive_hold_seconds) / n * 1e6;
  const double wait_us = (metadata_after.exclusive_wait_seconds - metadata_before.exclusive_wait_seconds +
                          metadata_after.shared_wait_seconds - metadata_before.shared_wait_seconds) /
                         n * 1e6;
  // Each tier's lock (each index shard's) is a serial section of its own: the busiest one
  // bounds, not their sum.
  const auto busiest_and_total = [n](const std::map<std::string, double>& was, const std::map<std::string, double>& now) {
    std::pair<double, double> us{0, 0};
    for (const auto& [labels, seconds] : now) {
      const auto before_it = was.find(labels);
      const double held = (seconds - (before_it != was.end() ? before_it->second : 0)) / n * 1e6;
      us.first = std::max(us.first, held);
      us.second += held;
    }
    return us;
  };
  const double tier_hold_us = busiest_and_total(before.tier_hold_seconds, after.tier_hold_seconds).first;
  const auto [index_hold_us, index_total_hold_us] = busiest_and_total(before.index_hold_seconds, after.index_hold_seconds);
  entry["lock_hold_us_per_op"] = hold_us;
  entry["lock_wait_us_per_op"] = wait_us;
  entry["lock_acquisitions_per_op"] =
      static_cast<double>(metadata_after.exclusive_acquisitions - metadata_before.exclusive_acquisitions) / n;
  entry["tier_lock_hold_us_per_op"] = tier_hold_us;
  entry["index_lock_hold_us_per_op"] = index_hold_us;
  entry["index_lock_total_hold_us_per_op"] = index_total_hold_us;
  const OperationCost cost{.cpu_us = NumberOr(entry, cpu_field, 0),
                           .lock_hold_us = hold_us,
                           .tier_lock_hold_us = tier_hold_us,
                           .index_lock_hold_us = index_hold_us,
                           .event_loop_cpu_us = NumberOr(entry, event_loop_cpu_field, 0)};
  entry["projected"] = ProjectScaling(cost, kProjectedCores);
}

}  // namespace kvtier::bench
