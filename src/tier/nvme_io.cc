#include "tier/nvme_io.h"

#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <system_error>

namespace kvtier {
namespace {

bool Transient(int error) { return error == EINTR || error == EAGAIN || error == EBUSY; }

// One request with plain system calls, resuming after short transfers.
void RunSync(int fd, IoRequest& request, std::size_t done) {
  while (done < request.length) {
    std::byte* buffer = request.buffer + done;
    const std::size_t length = request.length - done;
    const off_t offset = static_cast<off_t>(request.offset + done);
    const ssize_t n = request.write ? ::pwrite(fd, buffer, length, offset) : ::pread(fd, buffer, length, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      request.error = n < 0 ? errno : EIO;
      return;
    }
    done += static_cast<std::size_t>(n);
  }
  request.error = 0;
}

class PosixBlockIo final : public BlockIo {
 public:
  explicit PosixBlockIo(std::vector<int> fds) : fds_(std::move(fds)) {}
  std::string_view name() const override { return "pread"; }
  void Run(std::span<IoRequest> requests) override {
    for (IoRequest& request : requests) RunSync(fds_[request.file], request, 0);
  }

 private:
  const std::vector<int> fds_;
};

class UringBlockIo final : public BlockIo {
 public:
  struct Ring {
    std::mutex mutex;
    io_uring ring{};     // GUARDED_BY(mutex)
    bool fixed_files = false;
    bool broken = false;  // GUARDED_BY(mutex): a submit failed for good; run synchronously
  };

  UringBlockIo(std::vector<int> fds, unsigned depth, std::vector<std::unique_ptr<Ring>> rings)
      : fds_(std::move(fds)), depth_(depth), rings_(std::move(rings)) {}
  ~UringBlockIo() override {
    // Unregister the files first: that is synchronous, while a ring's teardown is deferred
    // in the kernel and would keep the files (and their flock) open for a while after exit,
    // so a tier reopened at once on the same files would find them locked.
    for (auto& ring : rings_) {
      (void)io_uring_unregister_files(&ring->ring);
      io_uring_queue_exit(&ring->ring);
    }
  }

  std::string_view name() const override { return "io_uring"; }

  void Run(std::span<IoRequest> requests) override {
    // Take a free ring if there is one, else wait for the one this call was dealt.
    const std::size_t start = next_.fetch_add(1, std::memory_order_relaxed) % rings_.size();
    for (std::size_t i = 0; i < rings_.size(); ++i) {
      Ring& ring = *rings_[(start + i) % rings_.size()];
      std::unique_lock lock(ring.mutex, std::try_to_lock);
      if (lock.owns_lock()) return RunOnRingLocked(ring, requests);
    }
    Ring& ring = *rings_[start];
    std::lock_guard lock(ring.mutex);
    RunOnRingLocked(ring, requests);
  }

 private:
  void RunOnRingLocked(Ring& r, std::span<IoRequest> requests) {
    std::vector<std::size_t> done(requests.size(), 0);
    std::deque<std::size_t> pending;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      requests[i].error = 0;
      if (requests[i].length > 0) pending.push_back(i);
    }
    if (r.broken) {
      for (std::size_t i : pending) RunSync(fds_[requests[i].file], requests[i], 0);
      return;
    }
    unsigned in_flight = 0;  // submitted, not yet reaped
    std::vector<std::size_t> queued;
    while (!pending.empty() || in_flight > 0) {
      queued.clear();
      while (!pending.empty() && in_flight + queued.size() < depth_) {
        io_uring_sqe* sqe = io_uring_get_sqe(&r.ring);
        if (sqe == nullptr) break;
        const std::size_t i = pending.front();
        pending.pop_front();
        IoRequest& q = requests[i];
        std::byte* buffer = q.buffer + done[i];
        // At most 1 GiB per request (an SQE holds 32 bits); the rest follows as a short transfer.
        const auto length = static_cast<unsigned>(std::min<std::size_t>(q.length - done[i], std::size_t{1} << 30));
        const uint64_t offset = q.offset + done[i];
        const int fd = r.fixed_files ? static_cast<int>(q.file) : fds_[q.file];
        if (q.write) {
          io_uring_prep_write(sqe, fd, buffer, length, offset);
        } else {
          io_uring_prep_read(sqe, fd, buffer, length, offset);
        }
        if (r.fixed_files) sqe->flags |= IOSQE_FIXED_FILE;
        io_uring_sqe_set_data64(sqe, i);
        queued.push_back(i);
      }
      std::size_t unsubmitted = queued.size();
      bool ring_failed = false;
      while (unsubmitted > 0 && !ring_failed) {
        const int rc = io_uring_submit(&r.ring);
        if (rc > 0) {
          unsubmitted -= std::min<std::size_t>(unsubmitted, static_cast<std::size_t>(rc));
          in_flight += static_cast<unsigned>(rc);
        } else if (rc == -EINTR) {
          continue;
        } else if ((rc == 0 || Transient(-rc)) && in_flight > 0) {
          ring_failed = !Reap(r, requests, done, pending, in_flight);  // room frees up as requests complete
        } else {
          ring_failed = true;
        }
      }
      if (!ring_failed && in_flight > 0) ring_failed = !Reap(r, requests, done, pending, in_flight);
      if (ring_failed) {
        // The ring is unusable: finish without it. SQEs left in its submission queue are never
        // submitted (the ring is only torn down from now on).
        r.broken = true;
        for (std::size_t k = queued.size() - unsubmitted; k < queued.size(); ++k) pending.push_back(queued[k]);
        while (in_flight > 0 && Reap(r, requests, done, pending, in_flight)) {
        }
        for (std::size_t i : pending) RunSync(fds_[requests[i].file], requests[i], done[i]);
        // Requests whose completion could not be reaped have unknown outcomes: failed.
        for (std::size_t i = 0; i < requests.size() && in_flight > 0; ++i) {
          if (requests[i].error == 0 && done[i] < requests[i].length &&
              std::find(pending.begin(), pending.end(), i) == pending.end()) {
            requests[i].error = EIO;
          }
        }
        return;
      }
    }
  }

  // Waits for at least one completion and reaps all that are ready; requests that moved
  // only part of their bytes go back to `pending`. False when the ring cannot be waited on.
  static bool Reap(Ring& r, std::span<IoRequest> requests, std::vector<std::size_t>& done,
                   std::deque<std::size_t>& pending, unsigned& in_flight) {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&r.ring, &cqe);
    while (rc == -EINTR) rc = io_uring_wait_cqe(&r.ring, &cqe);
    if (rc < 0) return false;
    while (cqe != nullptr) {
      const auto i = static_cast<std::size_t>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&r.ring, cqe);
      --in_flight;
      IoRequest& q = requests[i];
      if (res == -EAGAIN || res == -EINTR) {
        pending.push_back(i);
      } else if (res < 0) {
        q.error = -res;
      } else if (res == 0) {
        q.error = EIO;  // no progress and no reason: end of file or a device that gave up
      } else {
        done[i] += static_cast<std::size_t>(res);
        if (done[i] < q.length) pending.push_back(i);  // short transfer: resubmit the rest
      }
      cqe = nullptr;
      if (io_uring_peek_cqe(&r.ring, &cqe) != 0) break;
    }
    return true;
  }

  const std::vector<int> fds_;
  const unsigned depth_;
  std::vector<std::unique_ptr<Ring>> rings_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace

std::unique_ptr<BlockIo> NewPosixBlockIo(std::vector<int> fds) { return std::make_unique<PosixBlockIo>(std::move(fds)); }

Result<std::unique_ptr<BlockIo>> NewUringBlockIo(std::vector<int> fds, unsigned queue_depth, unsigned rings) {
  std::vector<std::unique_ptr<UringBlockIo::Ring>> made;
  for (unsigned i = 0; i < rings; ++i) {
    auto ring = std::make_unique<UringBlockIo::Ring>();
    const int rc = io_uring_queue_init(queue_depth, &ring->ring, 0);
    if (rc < 0) {
      if (!made.empty()) break;  // fewer rings (e.g. a memory limit) still work
      return Status::Unavailable("io_uring_queue_init refused: " + std::generic_category().message(-rc));
    }
    ring->fixed_files =
        io_uring_register_files(&ring->ring, fds.data(), static_cast<unsigned>(fds.size())) == 0;
    made.push_back(std::move(ring));
  }
  return std::unique_ptr<BlockIo>(std::make_unique<UringBlockIo>(std::move(fds), queue_depth, std::move(made)));
}

}  // namespace kvtier
