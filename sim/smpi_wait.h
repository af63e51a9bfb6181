// SimGrid SMPI build only: event-driven idle waiting for the progress engine.
//
// Under SMPI simulated time advances only while ranks block in SimGrid. Polling in small
// simulated sleeps costs real time per poll and per rank (a few microseconds each), so a
// 256-rank run would need millions of them, and larger sleeps make ranks late to see their
// messages. Instead an idle engine blocks: its next MPI_Testsome (the transport's poll;
// sim/smpi_poll_redirect.h routes it here) becomes an MPI_Waitany over the same requests
// plus a timer, so the rank wakes exactly when one of its operations completes or when its
// next deadline (a skip timer, the end of an injected delay) is due.
//
// The timer is a message to itself over the host's loopback link: a loopback of bandwidth B
// and latency L (FATPIPE: timers never share it, and no other traffic uses it) delivers S
// bytes in L + (S + 16) / B (SMPI adds a 16-byte envelope), so a timer of d seconds is a
// message of (d - L) * B - 16 bytes. sim/make_platform.py gives every host a 1 GB/s, 0 s
// loopback (1 ns per byte); timers longer than 64 KiB of loopback time are chained. Without
// such a loopback (or when a timer does not fire on time, e.g. under a network model with
// correction factors) blocking is off and the engine polls in simulated sleeps instead.
#pragma once

#include <mpi.h>

namespace skipring {
namespace smpi_wait {

// Makes this rank's next MPI_Testsome (through the redirect) block until one of its
// requests completes or the simulated clock reaches `deadline` (MPI_Wtime seconds; +inf: no
// timeout). False when blocking is unavailable (see above); then nothing is armed.
bool arm(double deadline);
// After the poll that followed arm(): true when that MPI_Testsome consumed the arming (it
// blocked). Clears the arming either way (a poll with no request does not call MPI_Testsome).
bool take_consumed();
// Why blocking is unavailable ("" while it is available or not yet tried).
const char* unavailable_reason();

}  // namespace smpi_wait
}  // namespace skipring

// MPI_Testsome, or the blocking wait when armed. Same contract as MPI_Testsome.
extern "C" int skipring_smpi_testsome(int incount, MPI_Request requests[], int* outcount,
                                      int indices[], MPI_Status statuses[]);
