// Wire phase ids: the WireHeader::phase value of every core's messages, in one list so that no
// two cores share one (the harness and the stale-message checks rely on it). Base layer: no MPI.
#pragma once

#include <cstdint>

namespace skipring {

// The ring all-reduce (also the phase of a StepRecord).
enum class Phase : uint8_t { kReduceScatter = 0, kAllgather = 1 };

// Recursive doubling (collectives/recursive_doubling.h).
constexpr uint8_t kRdPhaseRound = 2;   // exchange round; WireHeader.chunk = round index
constexpr uint8_t kRdPhaseFold = 3;    // an extra rank's input to its partner
constexpr uint8_t kRdPhaseResult = 4;  // the final result back to an extra rank
// Rabenseifner (collectives/rabenseifner.h).
constexpr uint8_t kRabPhaseRs = 5;  // reduce-scatter round (and the fold-in, round L)
constexpr uint8_t kRabPhaseAg = 6;  // allgather round (and the result to an extra, round L)
// The other ring collectives (collectives/ring_collectives.h).
constexpr uint8_t kRsPhase = 7;       // ring reduce-scatter; chunk = block (rank), segment
constexpr uint8_t kAgPhase = 8;       // ring allgather; chunk = block (rank), segment
constexpr uint8_t kBcastPhase = 9;    // chain broadcast; chunk = 0, segment
constexpr uint8_t kReducePhase = 10;  // chain reduce; chunk = 0, segment
// Spanning trees (collectives/tree_allreduce.h).
constexpr uint8_t kTreePhaseReduce = 11;
constexpr uint8_t kTreePhaseBcast = 12;
// The hierarchical all-reduce's own messages (collectives/hier_allreduce.h).
constexpr uint8_t kHierPhaseLocalRs = 13;  // an input segment to its block's local owner
constexpr uint8_t kHierPhaseLocalAg = 14;  // a final block segment from its local owner

// The late chain's own messages (collectives/late_chain.h).
constexpr uint8_t kLcPhaseArrive = 15;    // "I have arrived", to the census's coordinator
constexpr uint8_t kLcPhaseDecision = 16;  // the coordinator's set of late ranks
constexpr uint8_t kLcPhaseInput = 17;     // a late input (chunk: its index) or their sum D
constexpr uint8_t kLcPhaseFinal = 18;     // a final segment from the chain's tail to a late rank
constexpr uint8_t kLcPhaseGo = 19;        // the chain's head to a late rank: send your input

constexpr uint8_t kNumWirePhases = 20;

}  // namespace skipring
