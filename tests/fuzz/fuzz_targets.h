// Fuzz targets over the wire-header decoder and the text parsers (issue 13): each takes
// arbitrary bytes, must neither crash nor hang nor allocate without bound, and checks what must
// hold of any input it accepts (canonical re-encoding, round trips). A broken property aborts
// with a message, so libFuzzer and the unit-test driver (test_wire_robustness.cpp) both see it.
// Base layer only (no MPI): the configuration target is separate (runtime/, in the unit test).
#pragma once

#include <cstddef>
#include <cstdint>

namespace skipring {
namespace fuzz {

// Number of targets; run_target(i, ...) for i in [0, kTargets). Returns whether the input was
// accepted (a header decoded, a text parsed).
constexpr int kTargets = 6;
const char* target_name(int target);
bool run_target(int target, const uint8_t* data, size_t size);
// The first byte picks the target, the rest is its input (libFuzzer's entry point).
void run_one(const uint8_t* data, size_t size);
// A valid input for `target` (a seed the drivers mutate), indexed by `i` (wraps around).
const char* seed_input(int target, size_t i);

}  // namespace fuzz
}  // namespace skipring
