// `kvtier --version`: the version, the commit built and the optional features compiled in.
#include <string>

#include "build_info.h"  // generated: KVTIER_GIT_COMMIT
#include "cli/commands.h"
#include "port/cuda_device.h"

namespace kvtier::cli {

std::string VersionText() {
  std::string features = "io_uring, numa";  // required by the build (the NVMe and DRAM tiers)
  if (port::BuiltWithCuda()) features += ", cuda";
#ifdef KVTIER_HAVE_ICU
  features += ", icu";
#endif
  return std::string("kvtier ") + KVTIER_VERSION + " (commit " + KVTIER_GIT_COMMIT + ", " + KVTIER_BUILD_TYPE +
         ")\nfeatures: " + features;
}

}  // namespace kvtier::cli
