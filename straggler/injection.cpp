// SKIPRING_INJECT parser and the deterministic delay plan (see injection.h).
#include "straggler/injection.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <iterator>
#include <limits>
#include <string_view>
#include <system_error>

#include "common/hash.h"

namespace skipring {
namespace {

constexpr const char* kVar = "SKIPRING_INJECT";
constexpr uint64_t kGamma = kSplitMix64Gamma;
constexpr double kTwoPi = 6.283185307179586476925286766559;
constexpr double kMaxSigma = kMaxInjectSigma;

// ---- parsing helpers ----------------------------------------------------------------------------

std::string_view trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

bool parse_u64(std::string_view s, uint64_t* v) {
  if (!all_digits(s)) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// A plain decimal number: [+-]digits[.digits][(e|E)[+-]digits], at least one mantissa digit.
// Locale-independent; no inf/nan/hex. Negative values are returned as such (callers check).
bool parse_number(std::string_view s, double* v) {
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    negative = s[i] == '-';
    ++i;
  }
  const size_t body = i;
  // Skips a run of digits and returns how many there were.
  const auto skip_digits = [&]() {
    const size_t from = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - from;
  };
  size_t digits = skip_digits();
  if (i < s.size() && s[i] == '.') {
    ++i;
    digits += skip_digits();
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (skip_digits() == 0) return false;
  }
  if (i != s.size()) return false;
  double x = 0;
  const auto r = std::from_chars(s.data() + body, s.data() + s.size(), x);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || !std::isfinite(x)) return false;
  *v = negative ? -x : x;
  return true;
}

// A duration "<number><unit>" with unit ns|us|ms|s (whitespace between them tolerated).
// Returns an empty string on success, else why it is bad.
std::string parse_duration(std::string_view s, double* seconds) {
  s = trim(s);
  struct Unit {
    const char* suffix;
    double scale;
  };
  static constexpr Unit kUnits[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
  for (const Unit& u : kUnits) {
    const std::string_view suffix(u.suffix);
    if (s.size() < suffix.size() || s.substr(s.size() - suffix.size()) != suffix) continue;
    const std::string_view num = trim(s.substr(0, s.size() - suffix.size()));
    double v = 0;
    if (!parse_number(num, &v)) break;
    if (v < 0 || (v == 0 && std::signbit(v))) return "must be >= 0";
    const double secs = v * u.scale;
    if (!std::isfinite(secs)) break;
    if (secs > kMaxInjectDelay) {
      return fmt::format("must be at most {} (1 hour)", format_duration(kMaxInjectDelay));
    }
    *seconds = secs;
    return {};
  }
  return "expects a number >= 0 with a unit ns, us, ms or s (e.g. 2.5ms)";
}

// ---- deterministic randomness -------------------------------------------------------------------

// splitmix64's output function applied to x + gamma: a good 64-bit mixer.
uint64_t mix64(uint64_t x) { return splitmix64_mix(x + kGamma); }

// Key of one (seed, rank, seq, point, step) tuple; draws are the splitmix64 stream from it.
uint64_t tuple_key(uint64_t seed, int rank, uint64_t seq, InjectPoint point, int step) {
  uint64_t k = mix64(seed);
  k = mix64(k ^ static_cast<uint64_t>(static_cast<uint32_t>(rank)));
  k = mix64(k ^ seq);
  k = mix64(k ^ ((static_cast<uint64_t>(point) << 32) | static_cast<uint32_t>(step)));
  return k;
}

// Uniform in [0, 1) from draw `i` of the stream at `key`.
double uniform01(uint64_t key, uint64_t i) {
  return static_cast<double>(mix64(key + i * kGamma) >> 11) * 0x1.0p-53;
}

double draw(const InjectRule& r, uint64_t key) {
  switch (r.dist) {
    case InjectRule::Dist::kFixed:
      return r.a;
    case InjectRule::Dist::kExp:
      return -r.a * std::log1p(-uniform01(key, 1));  // 1 - u in (0, 1]
    case InjectRule::Dist::kUniform:
      return r.a + (r.b - r.a) * uniform01(key, 1);
    case InjectRule::Dist::kLognormal: {
      const double u1 = 1.0 - uniform01(key, 1);  // (0, 1]
      const double u2 = uniform01(key, 2);
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
      return r.a * std::exp(r.b * z);
    }
  }
  return 0;
}

// One draw of the rule's distribution, in [0, kMaxInjectDelay] (a long tail is cut there).
double sample(const InjectRule& r, uint64_t key) {
  const double d = draw(r, key);
  if (!(d >= 0)) return 0;  // NaN cannot come from checked parameters; never sleep on one
  return d < kMaxInjectDelay ? d : kMaxInjectDelay;
}

// ---- one rule -----------------------------------------------------------------------------------

constexpr const char* kKeys[] = {"rank", "delay", "dist", "at", "prob", "every", "step", "seed"};

// Parses one key's value into `r`; returns an empty string or the reason (without prefix).
std::string apply_key(std::string_view key, std::string_view value, InjectRule* r) {
  const auto bad = [&](const std::string& why) {
    return fmt::format("bad {} '{}': {}", key, value, why);
  };
  if (key == "rank") {
    if (value == "*") {
      r->rank = -1;
      return {};
    }
    uint64_t v = 0;
    if (!parse_u64(value, &v) || v > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      return bad("expects an integer >= 0 or '*'");
    }
    r->rank = static_cast<int>(v);
    return {};
  }
  if (key == "delay") {
    const std::string why = parse_duration(value, &r->a);
    if (!why.empty()) return bad(why);
    r->dist = InjectRule::Dist::kFixed;
    r->b = 0;
    return {};
  }
  if (key == "dist") {
    const char* kForms =
        "expects exp:MEAN, uniform:LO:HI or lognormal:MEDIAN:SIGMA (durations with a unit)";
    std::vector<std::string_view> parts = split(value, ':');
    for (auto& p : parts) p = trim(p);
    const std::string_view name = parts[0];
    const size_t nparams = parts.size() - 1;
    double a = 0, b = 0;
    if (name == "exp") {
      if (nparams != 1) return bad(kForms);
      const std::string why = parse_duration(parts[1], &a);
      if (!why.empty()) return bad(fmt::format("MEAN '{}': {}", parts[1], why));
      r->dist = InjectRule::Dist::kExp;
    } else if (name == "uniform") {
      if (nparams != 2) return bad(kForms);
      std::string why = parse_duration(parts[1], &a);
      if (!why.empty()) return bad(fmt::format("LO '{}': {}", parts[1], why));
      why = parse_duration(parts[2], &b);
      if (!why.empty()) return bad(fmt::format("HI '{}': {}", parts[2], why));
      if (a > b) return bad(fmt::format("LO '{}' > HI '{}'", parts[1], parts[2]));
      r->dist = InjectRule::Dist::kUniform;
    } else if (name == "lognormal") {
      if (nparams != 2) return bad(kForms);
      const std::string why = parse_duration(parts[1], &a);
      if (!why.empty()) return bad(fmt::format("MEDIAN '{}': {}", parts[1], why));
      if (!parse_number(parts[2], &b) || b < 0 || (b == 0 && std::signbit(b)) || b > kMaxSigma) {
        return bad(
            fmt::format("SIGMA '{}': expects a plain number in [0, {}]", parts[2], kMaxSigma));
      }
      r->dist = InjectRule::Dist::kLognormal;
    } else {
      return bad(kForms);
    }
    r->a = a;
    r->b = b;
    return {};
  }
  if (key == "at") {
    if (value == "arrive") {
      r->at_arrive = true, r->at_rs = false, r->at_ag = false;
    } else if (value == "rs") {
      r->at_arrive = false, r->at_rs = true, r->at_ag = false;
    } else if (value == "ag") {
      r->at_arrive = false, r->at_rs = false, r->at_ag = true;
    } else if (value == "step") {
      r->at_arrive = false, r->at_rs = true, r->at_ag = true;
    } else {
      return bad("expects arrive, rs, ag or step");
    }
    return {};
  }
  if (key == "prob") {
    double p = 0;
    if (!parse_number(value, &p) || !(p >= 0.0 && p <= 1.0)) {
      return bad("expects a number in [0, 1]");
    }
    r->prob = p;
    return {};
  }
  if (key == "every") {
    uint64_t n = 0;
    if (!parse_u64(value, &n) || n < 1) return bad("expects an integer >= 1");
    r->every = n;
    return {};
  }
  if (key == "step") {
    uint64_t k = 0;
    if (!parse_u64(value, &k) || k > 1000000) return bad("expects an integer >= 0");
    r->step = static_cast<int>(k);
    return {};
  }
  if (key == "seed") {
    uint64_t s = 0;
    if (!parse_u64(value, &s)) return bad("expects an unsigned 64-bit integer");
    r->seed = s;
    return {};
  }
  return fmt::format("unknown key '{}' (expects rank, delay, dist, at, prob, every, step or seed)",
                     key);
}

// Parses the text of one non-empty rule; returns an empty string or the reason.
std::string parse_rule(std::string_view text, InjectRule* r) {
  *r = InjectRule{};
  r->text = std::string(text);
  bool seen[std::size(kKeys)] = {};
  for (std::string_view item : split(text, ',')) {
    item = trim(item);
    if (item.empty()) return "empty item (expects key=value pairs separated by ',')";
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return fmt::format("'{}' is not key=value", item);
    const std::string_view key = trim(item.substr(0, eq));
    const std::string_view value = trim(item.substr(eq + 1));
    for (size_t k = 0; k < std::size(kKeys); ++k) {
      if (key != kKeys[k]) continue;
      if (seen[k]) return fmt::format("duplicate key '{}'", key);
      seen[k] = true;
    }
    std::string why = apply_key(key, value, r);
    if (!why.empty()) return why;
  }
  if (!seen[0]) return "missing 'rank' (expects rank=R or rank=*)";
  if (!seen[1] && !seen[2]) return "missing 'delay' or 'dist' (exactly one is required)";
  if (seen[1] && seen[2]) return "both 'delay' and 'dist' given (exactly one is allowed)";
  if (r->step >= 0 && r->at_arrive) return "'step' does not apply to at=arrive";
  return {};
}

// 15 significant digits: enough to round-trip what a user wrote, short of float noise
// (0.0025 * 1e3 prints as 2.5, not 2.5000000000000004).
std::string fmt_number(double v) { return fmt::format("{:.15g}", v); }

}  // namespace

bool InjectRule::applies_at(InjectPoint point) const {
  switch (point) {
    case InjectPoint::kArrive:
      return at_arrive;
    case InjectPoint::kReduceScatter:
      return at_rs;
    case InjectPoint::kAllgather:
      return at_ag;
  }
  return false;
}

Status InjectPlan::parse(const std::string& spec, InjectPlan* out, std::string* error) {
  InjectPlan plan;
  const std::vector<std::string_view> texts = split(spec, ';');
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string_view text = trim(texts[i]);
    if (text.empty()) continue;
    InjectRule rule;
    const std::string why = parse_rule(text, &rule);
    if (!why.empty()) {
      if (error != nullptr) *error = fmt::format("{}: rule {} ('{}'): {}", kVar, i + 1, text, why);
      return Status::kErrConfig;
    }
    plan.rules_.push_back(std::move(rule));
  }
  if (out != nullptr) *out = std::move(plan);
  return Status::kOk;
}

double InjectPlan::delay(int rank, uint64_t seq, InjectPoint point, int step) const {
  double total = 0;
  for (const InjectRule& r : rules_) {
    if (r.rank >= 0 && r.rank != rank) continue;
    if (!r.applies_at(point)) continue;
    if (r.every == 0 || seq % r.every != 0) continue;
    if (r.step >= 0 && r.step != step) continue;
    if (r.prob <= 0) continue;
    const uint64_t key = tuple_key(r.seed, rank, seq, point, step);
    if (r.prob < 1 && !(uniform01(key, 0) < r.prob)) continue;
    total += sample(r, key);
  }
  return total;
}

Status InjectPlan::check_ranks(int nranks, std::string* error) const {
  for (size_t i = 0; i < rules_.size(); ++i) {
    const InjectRule& r = rules_[i];
    if (r.rank < nranks) continue;
    if (error != nullptr) {
      *error = fmt::format(
          "{}: rule {} ('{}'): bad rank '{}': the job has {} rank{} (MPI_COMM_WORLD), expects "
          "an integer in [0, {}] or '*'",
          kVar, i + 1, r.text, r.rank, nranks, nranks == 1 ? "" : "s", nranks - 1);
    }
    return Status::kErrConfig;
  }
  return Status::kOk;
}

std::string InjectPlan::to_string() const {
  std::string out;
  for (const InjectRule& r : rules_) {
    if (!out.empty()) out += ';';
    out += r.rank < 0 ? std::string("rank=*") : fmt::format("rank={}", r.rank);
    switch (r.dist) {
      case InjectRule::Dist::kFixed:
        out += ",delay=" + format_duration(r.a);
        break;
      case InjectRule::Dist::kExp:
        out += ",dist=exp:" + format_duration(r.a);
        break;
      case InjectRule::Dist::kUniform:
        out += ",dist=uniform:" + format_duration(r.a) + ":" + format_duration(r.b);
        break;
      case InjectRule::Dist::kLognormal:
        out += ",dist=lognormal:" + format_duration(r.a) + ":" + fmt_number(r.b);
        break;
    }
    const char* at = "rs";
    if (r.at_arrive) {
      at = "arrive";
    } else if (r.at_rs && r.at_ag) {
      at = "step";
    } else if (r.at_ag) {
      at = "ag";
    }
    out += fmt::format(",at={}", at);
    if (r.prob != 1.0) out += ",prob=" + fmt_number(r.prob);
    if (r.every != 1) out += fmt::format(",every={}", r.every);
    if (r.step >= 0) out += fmt::format(",step={}", r.step);
    if (r.seed != 0) out += fmt::format(",seed={}", r.seed);
  }
  return out;
}

std::string format_duration(double seconds) {
  if (!(seconds > 0)) return "0s";
  if (seconds >= 1.0) return fmt_number(seconds) + "s";
  if (seconds >= 1e-3) return fmt_number(seconds * 1e3) + "ms";
  if (seconds >= 1e-6) return fmt_number(seconds * 1e6) + "us";
  return fmt_number(seconds * 1e9) + "ns";
}

}  // namespace skipring
