#include "transport/fake/fault_settings.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace softrdma::transport {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parse_probability(std::string_view value, double& out) {
  // strtod needs a terminated string; std::from_chars for double is not in GCC 10.
  const std::string text(value);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(v >= 0.0 && v <= 1.0)) return false;
  out = v;
  return true;
}

template <typename Int>
bool parse_integer(std::string_view value, Int& out) {
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  return !value.empty() && ec == std::errc() && end == value.data() + value.size();
}

bool parse_direction(std::string_view value, FaultDirection& out) {
  if (value == "tx") out = FaultDirection::kTx;
  else if (value == "rx") out = FaultDirection::kRx;
  else if (value == "both") out = FaultDirection::kBoth;
  else return false;
  return true;
}

// Applies one "key=value"; false when the key is unknown or the value invalid.
bool apply_item(std::string_view key, std::string_view value, FaultSettings& s) {
  if (key == "loss") return parse_probability(value, s.loss);
  if (key == "dup") return parse_probability(value, s.dup);
  if (key == "reorder") return parse_probability(value, s.reorder);
  if (key == "corrupt") return parse_probability(value, s.corrupt);
  if (key == "delay_us") return parse_integer(value, s.delay_us);
  if (key == "jitter_us") return parse_integer(value, s.jitter_us);
  if (key == "seed") return parse_integer(value, s.seed);
  if (key == "dir") return parse_direction(value, s.direction);
  return false;
}

}  // namespace

bool FaultSettings::any() const {
  return loss > 0 || dup > 0 || reorder > 0 || corrupt > 0 || delay_us > 0 || jitter_us > 0;
}

std::string FaultSettings::to_string() const {
  const char* dir = direction == FaultDirection::kTx   ? "tx"
                    : direction == FaultDirection::kRx ? "rx"
                                                       : "both";
  char text[256];
  std::snprintf(text, sizeof text,
                "loss=%.17g,dup=%.17g,reorder=%.17g,corrupt=%.17g,delay_us=%u,jitter_us=%u,"
                "seed=%llu,dir=%s",
                loss, dup, reorder, corrupt, delay_us, jitter_us,
                static_cast<unsigned long long>(seed), dir);
  return text;
}

std::optional<FaultSettings> FaultSettings::parse(std::string_view text, std::string& error) {
  FaultSettings settings;
  std::vector<std::string_view> seen;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    const size_t equals = item.find('=');
    const std::string_view key = trim(item.substr(0, equals));
    const std::string_view value =
        equals == std::string_view::npos ? std::string_view() : trim(item.substr(equals + 1));
    // A key given twice is a mistake whichever one was meant (issue 6 defect 6).
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      error = "SOFTRDMA_FAULTS: '" + std::string(key) + "' is given more than once";
      return std::nullopt;
    }
    seen.push_back(key);
    if (!apply_item(key, value, settings)) {
      error = "SOFTRDMA_FAULTS: bad item '" + std::string(item) +
              "' (expected loss|dup|reorder|corrupt=0..1, delay_us|jitter_us|seed=N, "
              "dir=tx|rx|both)";
      return std::nullopt;
    }
  }
  return settings;
}

}  // namespace softrdma::transport
