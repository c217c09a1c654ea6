// The replay's access sequence in libCacheSim's oracleGeneral format (replay.h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "kvtier/replay.h"
#include "replay/prefix_cache_model.h"

namespace kvtier {
namespace {

constexpr std::size_t kRecordBytes = 24;  // packed: u32 time, u64 id, u32 size, i64 next
static_assert(std::endian::native == std::endian::little, "oracleGeneral records are written as they lie in memory");

template <typename T>
void Put(char*& at, T value) {
  std::memcpy(at, &value, sizeof value);
  at += sizeof value;
}

template <typename T>
T Take(const char*& at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  at += sizeof value;
  return value;
}

}  // namespace

Result<std::vector<ReplayAccess>> ReplayAccesses(const std::vector<ReplayRequest>& requests) {
  KVTIER_ASSIGN_OR_RETURN(const replay_internal::ReplayIds ids, replay_internal::NumberBlocks(requests));
  std::vector<ReplayAccess> out;
  for (std::size_t q = 0; q < requests.size(); ++q) {
    const double seconds = std::clamp(std::floor(requests[q].arrival_s), 0.0, 4294967295.0);
    for (uint32_t id : ids.From(q, 0).first(requests[q].prompt.size())) {
      out.push_back({.clock_time = static_cast<uint32_t>(seconds), .obj_id = id});
    }
  }
  std::vector<int64_t> next_of(ids.keys.size(), -1);  // by block: its access after the one at hand
  for (std::size_t i = out.size(); i-- > 0;) {
    int64_t& next = next_of[out[i].obj_id];
    out[i].next_access_vtime = next;
    next = static_cast<int64_t>(i);
  }
  return out;
}

Status WriteOracleGeneralTrace(const std::vector<ReplayAccess>& accesses, const std::string& path) {
  std::vector<char> bytes(accesses.size() * kRecordBytes);
  char* at = bytes.data();
  for (const ReplayAccess& a : accesses) {
    Put(at, a.clock_time);
    Put(at, a.obj_id);
    Put(at, a.obj_size);
    Put(at, a.next_access_vtime);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return Status::IoError(path + ": cannot write the access trace");
  return Status::Ok();
}

Result<std::vector<ReplayAccess>> ReadOracleGeneralTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError(path + ": cannot open the access trace");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::IoError(path + ": cannot read the access trace");
  if (bytes.size() % kRecordBytes != 0) {
    return Status::InvalidArgument(path + ": " + std::to_string(bytes.size()) + " bytes is not a whole number of " +
                                   std::to_string(kRecordBytes) + "-byte oracleGeneral records");
  }
  std::vector<ReplayAccess> out(bytes.size() / kRecordBytes);
  const char* at = bytes.data();
  for (ReplayAccess& a : out) {
    a.clock_time = Take<uint32_t>(at);
    a.obj_id = Take<uint64_t>(at);
    a.obj_size = Take<uint32_t>(at);
    a.next_access_vtime = Take<int64_t>(at);
  }
  return out;
}

}  // namespace kvtier
