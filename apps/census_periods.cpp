// census_periods: what the census's rests (collectives/late_plan.h, CensusBackoff) see of a
// straggler, counted without MPI. For a rank late at every B-th call (a bucketed training loop
// whose rank comes late before the first of B buckets each step), from a phase, and for a rank
// late at random calls with probability p, it drives the backoff through --calls calls (a call
// the rank is late for and that runs the census takes it out; one that rests counts as a
// take-out kRestAgreementLag calls later, as the ranks' agreement after a rested call makes it
// in the communicator) and prints, per case, the share
// of late calls that ran the census (taken out, not rested), the share of quiet calls that ran
// it (its cost), and the first call from which no late call rests (-1: a late call rested in the
// last quarter), and how fast: the share of its first --first late calls taken out. Phases:
// every phase of B from call --start, the worst and the mean reported.
//
//   census_periods                  # B = 2..64 and p = 0.1 .. 0.67, 4000 calls
//   census_periods --calls 20000 --periods 7,8,12
//   census_periods --start 40 --first 10     # a straggler after 40 quiet calls: how fast
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "collectives/late_plan.h"

namespace {

struct Count {
  long late = 0, taken = 0, quiet = 0, quiet_census = 0;
  long first_taken = 0;         // of the first `first` late calls, how many ran the census
  long last_rest_of_late = -1;  // the last late call that rested
};

template <typename Late>
Count drive(long calls, long first, Late late) {
  skipring::CensusBackoff b;
  Count c;
  std::vector<long> rested_late;  // rested late calls whose agreement is pending
  for (long i = 0; i < calls; ++i) {
    // The rested calls' agreement counts a rested late call as a take-out kRestAgreementLag
    // calls later (Communicator::read_rest_agreements).
    while (!rested_late.empty() &&
           i >= rested_late.front() + static_cast<long>(skipring::kRestAgreementLag)) {
      b.saw_late_rest(static_cast<uint32_t>(i - rested_late.front()));
      rested_late.erase(rested_late.begin());
    }
    const bool l = late(i);
    const bool rests = b.rests();
    if (l) {
      ++c.late;
      if (rests) {
        c.last_rest_of_late = i;
      } else {
        ++c.taken;
        if (c.late <= first) ++c.first_taken;
      }
    } else {
      ++c.quiet;
      if (!rests) ++c.quiet_census;
    }
    if (rests) {
      b.after_rest();
      if (l) rested_late.push_back(i);
    } else {
      b.after_census(l);
    }
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"census_periods: the census's rests against periodic and random stragglers"};
  long calls = 4000;
  std::vector<int> periods;
  std::vector<double> probs = {0.1, 0.3, 0.5, 0.67};
  long first = 10;
  long start = 0;
  app.add_option("--calls", calls, "calls per case")->check(CLI::Range(16L, 10000000L));
  app.add_option("--first", first, "how fast: the share of the first N late calls taken out")
      ->check(CLI::Range(1L, 1000000L));
  app.add_option("--start", start, "the periodic straggler's first late call: start + phase")
      ->check(CLI::Range(0L, 1000000L));
  app.add_option("--periods", periods, "periods B (default 2..16, 20, 24, 32, 48, 64)")
      ->delimiter(',')
      ->check(CLI::Range(2, 100000));
  app.add_option("--probs", probs, "probabilities of a random straggler")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  CLI11_PARSE(app, argc, argv);
  if (periods.empty()) {
    for (int b = 2; b <= 16; ++b) periods.push_back(b);
    for (int b : {20, 24, 32, 48, 64}) periods.push_back(b);
  }
  std::printf(
      "case,late_taken_mean,late_taken_worst,quiet_censused_mean,no_late_rest_from_worst,"
      "first_late_taken_mean\n");
  for (int b : periods) {
    double taken_sum = 0, quiet_sum = 0, worst = 1, first_sum = 0;
    long from_worst = 0;
    for (int phase = 0; phase < b; ++phase) {
      const Count c = drive(
          calls, first, [&](long i) { return i >= start + phase && (i - start - phase) % b == 0; });
      const double t = c.late ? static_cast<double>(c.taken) / c.late : 1.0;
      taken_sum += t;
      first_sum += static_cast<double>(c.first_taken) / std::min(c.late, first);
      worst = std::min(worst, t);
      quiet_sum += c.quiet ? static_cast<double>(c.quiet_census) / c.quiet : 0.0;
      const long from = c.last_rest_of_late >= calls * 3 / 4 ? -1 : c.last_rest_of_late + 1;
      if (from_worst >= 0) from_worst = from < 0 ? -1 : std::max(from_worst, from);
    }
    std::printf("every %d,%.3f,%.3f,%.3f,%ld,%.3f\n", b, taken_sum / b, worst, quiet_sum / b,
                from_worst, first_sum / b);
  }
  for (double p : probs) {
    std::mt19937_64 gen(12345);
    std::bernoulli_distribution coin(p);
    std::vector<char> draws(static_cast<size_t>(calls));
    for (auto& d : draws) d = coin(gen) ? 1 : 0;
    const Count c = drive(calls, first, [&](long i) { return draws[static_cast<size_t>(i)] != 0; });
    const double t = c.late ? static_cast<double>(c.taken) / c.late : 1.0;
    const double q = c.quiet ? static_cast<double>(c.quiet_census) / c.quiet : 0.0;
    const double f = static_cast<double>(c.first_taken) / std::max(1L, std::min(c.late, first));
    std::printf("random %.2f,%.3f,%.3f,%.3f,,%.3f\n", p, t, t, q, f);
  }
  return 0;
}
