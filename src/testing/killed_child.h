// Crash tests: a writer runs in a forked child and reports each acknowledged step on a pipe
// (one fixed-size record per step, written after the step returned); the parent SIGKILLs it
// after a delay and gets back every record written before the kill. What the child
// acknowledged must then survive whatever the kill interrupted.
//
// Thread-safety: fork copies only the calling thread, so call this while the test process
// runs no other threads (close what the last round opened first).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::testing {

// Writes one report; a child that cannot report exits 4 (the parent sees a failed writer).
template <typename Report>
void SendReport(int report_fd, const Report& report) {
  static_assert(std::is_trivially_copyable_v<Report>);
  if (::write(report_fd, &report, sizeof report) != static_cast<ssize_t>(sizeof report)) ::_exit(4);
}

// Runs `writer(report_fd)` in a child (it must end with _exit: 0 when it finished its work),
// kills it after `delay`, and returns its reports in order. Internal when the child failed
// (exited non-zero), naming its exit code.
template <typename Report>
Result<std::vector<Report>> RunChildUntilKilled(const std::function<void(int report_fd)>& writer,
                                                std::chrono::microseconds delay) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::IoError("pipe failed");
  const pid_t child = ::fork();
  if (child < 0) return Status::IoError("fork failed");
  if (child == 0) {
    ::close(fds[0]);
    writer(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::this_thread::sleep_for(delay);
  ::kill(child, SIGKILL);
  int wait_status = 0;
  const bool waited = ::waitpid(child, &wait_status, 0) == child;
  std::vector<Report> reports;
  Report r;
  while (::read(fds[0], &r, sizeof r) == static_cast<ssize_t>(sizeof r)) reports.push_back(r);
  ::close(fds[0]);
  if (!waited) return Status::Internal("waitpid failed");
  if (!WIFSIGNALED(wait_status) && !(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0)) {
    return Status::Internal("the writer failed with exit code " + std::to_string(WEXITSTATUS(wait_status)));
  }
  return reports;
}

}  // namespace kvtier::testing
