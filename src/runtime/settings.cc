#include "runtime/settings.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "engine/limits.h"
#include "transport/udp/host_address.h"

namespace softrdma::runtime {

namespace {

constexpr uint32_t kMaxIdleProbeMs = 3'600'000;  // an hour
constexpr uint32_t kMaxLineRateGbps = 1'000'000;  // 1 Pbit/s: any link of this century
constexpr uint32_t kMaxTargetDelayUs = 1'000'000;  // a second: beyond any queue worth keeping
constexpr uint32_t kMaxSharedPagesMb = 65536;        // 64 GiB

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

bool parse_window(const char* text, uint32_t& out) {
  std::string_view s(text);
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return false;
  if (v < 1 || v > engine::kMaxWindowPackets) return false;
  out = v;
  return true;
}

bool parse_up_to(const char* text, uint32_t most, uint32_t& out) {
  std::string_view s(text);
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v > most) return false;
  out = v;
  return true;
}

}  // namespace

std::string Settings::device_name_from_environment() {
  const char* v = env("SOFTRDMA_DEVICE");
  if (v != nullptr) return v;
  return iwarp_from_environment() ? "softiwarp0" : Settings{}.device_name;
}

bool Settings::iwarp_from_environment() {
  const char* v = env("SOFTRDMA_WIRE");
  return v != nullptr && std::string_view(v) == "iwarp";
}

std::optional<bool> Settings::sysfs_view_from_environment(std::string& error) {
  const char* v = env("SOFTRDMA_SYSFS_VIEW");
  if (v == nullptr) return Settings{}.sysfs_view;
  const std::string mode(v);
  if (mode == "on" || mode == "off") return mode == "on";
  error = "SOFTRDMA_SYSFS_VIEW must be \"on\" or \"off\", not \"" + mode + "\"";
  return std::nullopt;
}

bool Settings::device_name_usable() { return device_name_from_environment().size() < 64; }

std::optional<Settings> Settings::from_environment(std::string& error) {
  Settings s;
  if (const char* v = env("SOFTRDMA_WIRE")) {
    const std::string wire(v);
    if (wire != "roce" && wire != "iwarp") {
      error = "SOFTRDMA_WIRE must be \"roce\" or \"iwarp\", not \"" + wire + "\"";
      return std::nullopt;
    }
    s.iwarp = wire == "iwarp";
  }
  s.device_name = device_name_from_environment();
  if (const char* v = env("SOFTRDMA_ADDR")) s.address = v;
  if (const char* v = env("SOFTRDMA_PCAP")) s.pcap_path = v;
  if (const char* v = env("SOFTRDMA_FAULTS")) s.faults = v;
  if (const char* v = env("SOFTRDMA_TRANSPORT")) {
    const std::string mode(v);
    if (mode != "auto" && mode != "udp") {
      error = "SOFTRDMA_TRANSPORT must be \"auto\" or \"udp\", not \"" + mode + "\"";
      return std::nullopt;
    }
    s.same_host = mode == "auto";
  }
  if (const char* v = env("SOFTRDMA_SHARE_ADDRESS")) {
    const std::string share(v);
    if (share != "0" && share != "1" && share != "crossed") {
      error = "SOFTRDMA_SHARE_ADDRESS must be \"0\", \"1\" or \"crossed\", not \"" + share +
              "\"";
      return std::nullopt;
    }
    s.share_address = share != "0";
    s.share_crossed = share == "crossed" && !s.iwarp;
  }
  if (!s.pcap_path.empty() || !s.faults.empty() || s.iwarp) s.same_host = false;
  if (s.iwarp && (!s.pcap_path.empty() || !s.faults.empty())) {
    // Both act on RoCEv2's datagrams; iWARP's bytes are the kernel's TCP.
    error = std::string(!s.pcap_path.empty() ? "SOFTRDMA_PCAP" : "SOFTRDMA_FAULTS") +
            " works on RoCEv2's datagrams; with SOFTRDMA_WIRE=iwarp capture with tcpdump and "
            "impair with iptables (docs/configuration.md)";
    return std::nullopt;
  }
  if (const char* v = env("SOFTRDMA_PROGRESS")) {
    const std::string mode(v);
    if (mode != "thread" && mode != "inline") {
      error = "SOFTRDMA_PROGRESS must be \"thread\" or \"inline\", not \"" + mode + "\"";
      return std::nullopt;
    }
    s.progress_thread = mode == "thread";
  }
  if (const char* v = env("SOFTRDMA_WINDOW")) {
    if (!parse_window(v, s.max_unacked_packets)) {
      error = "SOFTRDMA_WINDOW must be a number of packets from 1 to " +
              std::to_string(engine::kMaxWindowPackets) + ", not \"" + v + "\"";
      return std::nullopt;
    }
    s.selective_window = s.max_unacked_packets;  // set: every RC connection's
  }
  if (const char* v = env("SOFTRDMA_INITIAL_WINDOW")) {
    if (!parse_window(v, s.initial_window)) {
      error = "SOFTRDMA_INITIAL_WINDOW must be a number of packets from 1 to " +
              std::to_string(engine::kMaxWindowPackets) + ", not \"" + v + "\"";
      return std::nullopt;
    }
  }
  if (const char* v = env("SOFTRDMA_SELECTIVE_REPEAT")) {
    const std::string mode(v);
    if (mode == "negotiated") {
      s.selective_repeat = engine::SelectiveRepeatMode::kNegotiated;
    } else if (mode == "always") {
      s.selective_repeat = engine::SelectiveRepeatMode::kAlways;
    } else if (mode == "off") {
      s.selective_repeat = engine::SelectiveRepeatMode::kOff;
    } else {
      error = "SOFTRDMA_SELECTIVE_REPEAT must be \"negotiated\", \"always\" or \"off\", not \"" +
              mode + "\"";
      return std::nullopt;
    }
  }
  if (const char* v = env("SOFTRDMA_CONGESTION")) {
    const std::string mode(v);
    if (mode != "dcqcn+delay" && mode != "dcqcn" && mode != "delay" && mode != "off") {
      error = "SOFTRDMA_CONGESTION must be \"dcqcn+delay\", \"dcqcn\", \"delay\" or \"off\", not \"" +
              mode + "\"";
      return std::nullopt;
    }
    s.dcqcn = mode.starts_with("dcqcn");
    s.delay_control = mode.ends_with("delay");
  }
  if (const char* v = env("SOFTRDMA_TARGET_DELAY_US");
      v != nullptr && (!parse_up_to(v, kMaxTargetDelayUs, s.target_delay_us) || s.target_delay_us == 0)) {
    error = "SOFTRDMA_TARGET_DELAY_US must be a number of microseconds from 1 to " +
            std::to_string(kMaxTargetDelayUs) + ", not \"" + v + "\"";
    return std::nullopt;
  }
  if (const char* v = env("SOFTRDMA_LINE_RATE_GBPS");
      v != nullptr && (!parse_up_to(v, kMaxLineRateGbps, s.line_rate_gbps) || s.line_rate_gbps == 0)) {
    error = "SOFTRDMA_LINE_RATE_GBPS must be a number of Gbit/s from 1 to " +
            std::to_string(kMaxLineRateGbps) + ", not \"" + v + "\"";
    return std::nullopt;
  }
  if (const char* v = env("SOFTRDMA_IDLE_PROBE_MS");
      v != nullptr && !parse_up_to(v, kMaxIdleProbeMs, s.idle_probe_ms)) {
    error = "SOFTRDMA_IDLE_PROBE_MS must be a number of milliseconds from 0 (off) to " +
            std::to_string(kMaxIdleProbeMs) + ", not \"" + v + "\"";
    return std::nullopt;
  }
  if (const char* v = env("SOFTRDMA_SHARED_PAGES_MB");
      v != nullptr && !parse_up_to(v, kMaxSharedPagesMb, s.shared_pages_mb)) {
    error = "SOFTRDMA_SHARED_PAGES_MB must be a number of MiB from 0 (off) to " +
            std::to_string(kMaxSharedPagesMb) + ", not \"" + v + "\"";
    return std::nullopt;
  }
  const std::optional<bool> view = sysfs_view_from_environment(error);
  if (!view) return std::nullopt;
  s.sysfs_view = *view;
  if (s.device_name.size() >= 64) {
    error = "SOFTRDMA_DEVICE is longer than a verbs device name may be (63 bytes)";
    return std::nullopt;
  }
  return s;
}

std::string Settings::host_address() { return transport::udp::host_address(); }

std::string Settings::describe_address() const {
  if (address.empty())
    return share_address ? "(the host's address)" : "(a loopback address of this process's own)";
  if (address_is_default) return address + " (the host's address; SOFTRDMA_ADDR not set)";
  return address;
}

std::string Settings::congestion_description() const {
  if (dcqcn && delay_control)
    return "dcqcn+delay (ECN-capable, CNPs cut the rate; the round trip bounds the window)";
  if (dcqcn) return "dcqcn (ECN-capable; CE marks answered by CNPs, CNPs cut the rate)";
  if (delay_control) return "delay (Not-ECT, no CNPs; the round trip bounds the window)";
  return "off (Not-ECT; no CNPs, no pacing, the fixed window)";
}

std::vector<std::pair<std::string, std::string>> Settings::describe() const {
  return {
      {"SOFTRDMA_DEVICE", device_name},
      {"SOFTRDMA_WIRE", iwarp ? "iwarp (RDMAP/DDP/MPA over TCP)" : "roce (RoCEv2 over UDP)"},
      {"SOFTRDMA_ADDR", describe_address()},
      {"SOFTRDMA_PCAP", pcap_path.empty() ? "(off)" : pcap_path},
      {"SOFTRDMA_FAULTS", faults.empty() ? "(off)" : faults},
      {"SOFTRDMA_TRANSPORT", same_host ? "auto (same-host path where possible)" : "udp"},
      {"SOFTRDMA_SHARE_ADDRESS",
       share_crossed   ? "crossed (shared; every packet handed over, for measuring it)"
       : share_address ? "1 (shared with this host's processes)"
                       : "0 (this process's alone)"},
      {"SOFTRDMA_PROGRESS", progress_thread ? "thread" : "inline"},
      {"SOFTRDMA_WINDOW",
       max_unacked_packets == selective_window
           ? std::to_string(max_unacked_packets)
           : std::to_string(max_unacked_packets) + " (go-back-N), " +
                 std::to_string(selective_window) + " (selective repeat)"},
      {"SOFTRDMA_INITIAL_WINDOW", std::to_string(initial_window) + " (slow start from there)"},
      {"SOFTRDMA_SELECTIVE_REPEAT",
       selective_repeat == engine::SelectiveRepeatMode::kAlways ? "always (every RC QP)"
       : selective_repeat == engine::SelectiveRepeatMode::kOff
           ? "off (go-back-N only)"
           : "negotiated (RC connections whose peer agreed through ECE)"},
      {"SOFTRDMA_CONGESTION", congestion_description()},
      {"SOFTRDMA_TARGET_DELAY_US", std::to_string(target_delay_us)},
      {"SOFTRDMA_LINE_RATE_GBPS", std::to_string(line_rate_gbps)},
      {"SOFTRDMA_IDLE_PROBE_MS", idle_probe_ms == 0 ? "0 (off)" : std::to_string(idle_probe_ms)},
      {"SOFTRDMA_SHARED_PAGES_MB",
       shared_pages_mb == 0 ? "0 (off)" : std::to_string(shared_pages_mb)},
      {"SOFTRDMA_SYSFS_VIEW", sysfs_view ? "on" : "off"},
  };
}

}  // namespace softrdma::runtime
