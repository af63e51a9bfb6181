// census_periods: what the census's rests (collectives/late_plan.h, CensusBackoff) see of a
// straggler, counted without MPI. For a rank late at every B-th call (a bucketed training loop
// whose rank comes late before the first of B buckets each step), from a phase, and for a rank
// late at random calls with probability p, it drives the backoff through --calls calls (a call
// the rank is late for and that runs the census takes it out) and prints, per case, the share
// of late calls that ran the census (taken out, not rested), the share of quiet calls that ran
// it (its cost), and the first call from which no late call rests (-1: a late call rested in the
// last quarter). Phases: every phase of B, the worst and the mean reported.
//
//   census_periods                  # B = 2..64 and p = 0.1 .. 0.67, 4000 calls
//   census_periods --calls 20000 --periods 7,8,12
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
  long last_rest_of_late = -1;  // the last late call that rested
};

template <typename Late>
Count drive(long calls, Late late) {
  skipring::CensusBackoff b;
  Count c;
  for (long i = 0; i < calls; ++i) {
    const bool l = late(i);
    const bool rests = b.rests();
    if (l) {
      ++c.late;
      if (rests) {
        c.last_rest_of_late = i;
      } else {
        ++c.taken;
      }
    } else {
      ++c.quiet;
      if (!rests) ++c.quiet_census;
    }
    if (rests) {
      b.after_rest();
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
  app.add_option("--calls", calls, "calls per case")->check(CLI::Range(16L, 10000000L));
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
      "case,late_taken_mean,late_taken_worst,quiet_censused_mean,no_late_rest_from_worst\n");
  for (int b : periods) {
    double taken_sum = 0, quiet_sum = 0, worst = 1;
    long from_worst = 0;
    for (int phase = 0; phase < b; ++phase) {
      const Count c = drive(calls, [&](long i) { return i >= phase && (i - phase) % b == 0; });
      const double t = c.late ? static_cast<double>(c.taken) / c.late : 1.0;
      taken_sum += t;
      worst = std::min(worst, t);
      quiet_sum += c.quiet ? static_cast<double>(c.quiet_census) / c.quiet : 0.0;
      const long from = c.last_rest_of_late >= calls * 3 / 4 ? -1 : c.last_rest_of_late + 1;
      if (from_worst >= 0) from_worst = from < 0 ? -1 : std::max(from_worst, from);
    }
    std::printf("every %d,%.3f,%.3f,%.3f,%ld\n", b, taken_sum / b, worst, quiet_sum / b,
                from_worst);
  }
  for (double p : probs) {
    std::mt19937_64 gen(12345);
    std::bernoulli_distribution coin(p);
    std::vector<char> draws(static_cast<size_t>(calls));
    for (auto& d : draws) d = coin(gen) ? 1 : 0;
    const Count c = drive(calls, [&](long i) { return draws[static_cast<size_t>(i)] != 0; });
    const double t = c.late ? static_cast<double>(c.taken) / c.late : 1.0;
    const double q = c.quiet ? static_cast<double>(c.quiet_census) / c.quiet : 0.0;
    std::printf("random %.2f,%.3f,%.3f,%.3f,\n", p, t, t, q);
  }
  return 0;
}
