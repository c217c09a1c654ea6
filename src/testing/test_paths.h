// Where the unit tests find the files they read: the fixtures under tests/fixtures, and the
// repository they sit in (examples, the fuzz corpus, ../shared/data beside the clone).
//
// The paths are compiled into one small file (test_paths.cc) rather than defined for every
// test file, so that a clone at another path recompiles that file only and every other test
// file stays a ccache hit.
//
// Thread-safety: the functions only return constants.
#pragma once

#include <string>

namespace kvtier::testing {

// <repository>/tests/fixtures
std::string FixturesDir();

// The repository's root.
std::string SourceDir();

}  // namespace kvtier::testing
