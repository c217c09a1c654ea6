#include "testing/test_paths.h"

namespace kvtier::testing {

std::string FixturesDir() { return std::string(KVTIER_SOURCE_DIR) + "/tests/fixtures"; }

std::string SourceDir() { return KVTIER_SOURCE_DIR; }

}  // namespace kvtier::testing
