#include "scaling_projection.h"

#include <algorithm>

namespace kvtier::bench {
namespace {

constexpr int kProjectedCores = 64;

}  // namespace

nlohmann::json ProjectScaling(double cpu_us_per_op, double lock_hold_us_per_op, int cores) {
  if (cpu_us_per_op <= 0 || cores <= 0) return nullptr;
  const double by_cpu = static_cast<double>(cores) * 1e6 / cpu_us_per_op;
  const double by_lock = lock_hold_us_per_op > 0 ? 1e6 / lock_hold_us_per_op : by_cpu;
  return {{"cores", cores}, {"ops_per_s", std::min(by_cpu, by_lock)}, {"bound", by_lock < by_cpu ? "metadata lock" : "cpu"}};
}

void AddLockFields(const LockProfile& before, const LockProfile& after, uint64_t ops, const char* cpu_field,
                   nlohmann::json& entry) {
  if (ops == 0) return;
  const double n = static_cast<double>(ops);
  const double hold_us = (after.exclusive_hold_seconds - before.exclusive_hold_seconds) / n * 1e6;
  const double wait_us = (after.exclusive_wait_seconds - before.exclusive_wait_seconds + after.shared_wait_seconds -
                          before.shared_wait_seconds) /
                         n * 1e6;
  entry["lock_hold_us_per_op"] = hold_us;
  entry["lock_wait_us_per_op"] = wait_us;
  entry["lock_acquisitions_per_op"] = static_cast<double>(after.exclusive_acquisitions - before.exclusive_acquisitions) / n;
  const nlohmann::json& cpu = entry[cpu_field];
  entry["projected"] = cpu.is_number() ? ProjectScaling(cpu.get<double>(), hold_us, kProjectedCores) : nlohmann::json();
}

}  // namespace kvtier::bench
