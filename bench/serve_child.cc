#include "serve_child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvtier::bench {

Result<pid_t> SpawnServe(const std::string& config, const std::string& log, const cpu_set_t* cpus) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::IoError(std::string("fork: ") + std::strerror(errno));
  if (pid > 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died before the death signal was set
  if (cpus != nullptr && ::sched_setaffinity(0, sizeof(*cpus), cpus) != 0) ::_exit(126);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
  }
  ::execl("/proc/self/exe", "kvtier", "serve", "--config", config.c_str(), static_cast<char*>(nullptr));
  ::_exit(127);
}

}  // namespace kvtier::bench
