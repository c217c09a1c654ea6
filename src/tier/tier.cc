#include "kvtier/tier.h"

namespace kvtier {

std::string_view TierKindName(TierKind kind) {
  switch (kind) {
    case TierKind::kGpuHbm: return "gpu_hbm";
    case TierKind::kCpuDram: return "cpu_dram";
    case TierKind::kCxlMemory: return "cxl_memory";
    case TierKind::kNvme: return "nvme";
    case TierKind::kRemotePool: return "remote_pool";
    case TierKind::kParallelFs: return "parallel_fs";
  }
  return "unknown";
}

std::vector<Status> Tier::WriteBatch(std::span<const WriteOp> ops) {
  std::vector<Status> out;
  out.reserve(ops.size());
  for (const WriteOp& op : ops) out.push_back(Write(op.key, op.payload));
  return out;
}

std::vector<Result<std::size_t>> Tier::ReadBatch(std::span<const ReadOp> ops) {
  std::vector<Result<std::size_t>> out;
  out.reserve(ops.size());
  for (const ReadOp& op : ops) out.push_back(Read(op.key, op.out));
  return out;
}

}  // namespace kvtier
