#include "kvtier/tier.h"

#include "util/task_pool.h"

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

Result<std::vector<BlockKey>> Tier::ListKeys() const {
  return Status::Unsupported(name() + ": a " + std::string(TierKindName(kind())) + " tier does not list its blocks");
}

std::vector<Status> Tier::WriteBatch(std::span<const WriteOp> ops) {
  std::vector<Status> out;
  out.reserve(ops.size());
  for (const WriteOp& op : ops) out.push_back(Write(op));
  return out;
}

std::vector<Result<std::size_t>> Tier::ReadBatch(std::span<const ReadOp> ops) {
  std::vector<Result<std::size_t>> out;
  out.reserve(ops.size());
  for (const ReadOp& op : ops) out.push_back(Read(op));
  return out;
}

void Tier::SubmitWriteBatch(std::vector<WriteOp> ops, WriteDone done) {
  TaskPool::ForTierIo().Submit([this, ops = std::move(ops), done = std::move(done)] { done(WriteBatch(ops)); });
}

void Tier::SubmitReadBatch(std::vector<ReadOp> ops, ReadDone done) {
  TaskPool::ForTierIo().Submit([this, ops = std::move(ops), done = std::move(done)] { done(ReadBatch(ops)); });
}

std::future<std::vector<Status>> Tier::WriteBatchAsync(std::vector<WriteOp> ops) {
  auto promise = std::make_shared<std::promise<std::vector<Status>>>();
  std::future<std::vector<Status>> result = promise->get_future();
  SubmitWriteBatch(std::move(ops), [promise](std::vector<Status> statuses) { promise->set_value(std::move(statuses)); });
  return result;
}

std::future<std::vector<Result<std::size_t>>> Tier::ReadBatchAsync(std::vector<ReadOp> ops) {
  auto promise = std::make_shared<std::promise<std::vector<Result<std::size_t>>>>();
  std::future<std::vector<Result<std::size_t>>> result = promise->get_future();
  SubmitReadBatch(std::move(ops), [promise](std::vector<Result<std::size_t>> sizes) { promise->set_value(std::move(sizes)); });
  return result;
}

}  // namespace kvtier
