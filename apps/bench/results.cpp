// skipring_bench results: derived values (ratios, labels, summaries) of the measurements.
#include "apps/bench/results.h"

#include <algorithm>
#include <limits>

namespace skipring_bench {

std::optional<double> VariantResult::per_iter(const std::optional<uint64_t>& total) const {
  if (!total || iters <= 0) return std::nullopt;
  return static_cast<double>(*total) / iters;
}

const VariantResult* InterleavedRow::find(Variant v) const {
  for (const VariantResult& r : variants) {
    if (r.variant == v) return &r;
  }
  return nullptr;
}

double InterleavedRow::p50_ratio(Variant a, Variant b) const {
  const VariantResult* ra = find(a);
  const VariantResult* rb = find(b);
  if (!ra || !rb) return std::numeric_limits<double>::quiet_NaN();
  return ratio(ra->after_us.p50, rb->after_us.p50);
}

std::string Row::algo_label() const {
  std::string ran = "?";
  for (const auto* m : {&oop, &ip}) {
    if (m->has_value() && (*m)->stats && !(*m)->stats->algo.empty()) {
      ran = (*m)->stats->algo;
      break;
    }
  }
  return algo_requested == "auto" || algo_requested.empty() ? "auto:" + ran : ran;
}

ImplResult summarize(const RawRun& raw, uint64_t bytes, int nranks) {
  ImplResult r;
  r.wrong = raw.wrong;
  r.rank_avg_us = raw.rank_mean_s[0] * 1e6;
  r.rank_min_us = raw.rank_mean_s[1] * 1e6;
  r.rank_max_us = raw.rank_mean_s[2] * 1e6;
  if (raw.max_s.empty()) return r;
  std::vector<double> us;
  for (double s : raw.max_s) us.push_back(s * 1e6);
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  r.avg_us = sum / static_cast<double>(us.size());
  r.p50_us = percentile(us, 50);
  r.iqm_us = interquartile_mean(us);
  r.p99_us = percentile(us, 99);
  r.min_us = us.front();
  r.max_us = us.back();
  r.algbw = r.avg_us > 0 ? static_cast<double>(bytes) / (r.avg_us * 1e-6) / 1e9 : 0;
  const double factor = nranks > 1 ? 2.0 * (nranks - 1) / nranks : 0.0;
  r.busbw = r.algbw * factor;
  return r;
}

}  // namespace skipring_bench
