// Settings of the fault injector (fault_injector.h), parsed from a string such as
// the environment variable SOFTRDMA_FAULTS:
//
//   SOFTRDMA_FAULTS="loss=0.05,dup=0.01,reorder=0.02,delay_us=200,corrupt=0.001,seed=42,dir=tx"
//
//   loss=P       drop each packet with probability P (0..1)
//   dup=P        send/deliver a packet twice
//   reorder=P    hold a packet back until the next one has passed (at most 1 ms)
//   corrupt=P    flip one random bit after the ICRC was computed: the receiver's
//                ICRC check must catch it (counted there as rx_bad_icrc)
//   delay_us=D   add D µs to every packet
//   jitter_us=J  add a further uniform 0..J µs to every packet (this reorders)
//   seed=S       seed of the pseudo-random decisions (same seed + same packets =
//                same faults); default 1
//   dir=tx|rx|both  which side of the wrapped transport is impaired; default tx
//
// Keys may appear in any order; unknown keys and out-of-range values are errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace softrdma::transport {

enum class FaultDirection : uint8_t { kTx = 1, kRx = 2, kBoth = 3 };
constexpr bool covers(FaultDirection set, FaultDirection one) {
  return (static_cast<uint8_t>(set) & static_cast<uint8_t>(one)) != 0;
}

struct FaultSettings {
  double loss = 0;
  double dup = 0;
  double reorder = 0;
  double corrupt = 0;
  uint32_t delay_us = 0;
  uint32_t jitter_us = 0;
  uint64_t seed = 1;
  FaultDirection direction = FaultDirection::kTx;

  // True when any random fault or delay is configured.
  bool any() const;
  // The canonical settings string (parse(to_string()) gives the same settings).
  std::string to_string() const;

  // Parses the format above. An empty string gives no faults. On error returns
  // nullopt and says which item is wrong in `error`.
  static std::optional<FaultSettings> parse(std::string_view text, std::string& error);
};

}  // namespace softrdma::transport
