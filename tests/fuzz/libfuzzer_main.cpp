// libFuzzer entry point over every fuzz target (tests/fuzz/fuzz_targets.h): the first byte
// picks the target.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  skipring::fuzz::run_one(data, size);
  return 0;
}
