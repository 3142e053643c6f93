// Every user-facing setting of softrdma, in one place (docs/configuration.md).
// Each comes from an environment variable; from_environment() reads them all and
// rejects a malformed value with a message that names the variable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/limits.h"

namespace softrdma::runtime {

struct Settings {
  // SOFTRDMA_DEVICE, or the default name; usable: fits a verbs device name.
  static std::string device_name_from_environment();
  static bool device_name_usable();
  // SOFTRDMA_DEVICE: the device name verbs programs see (default: softrdma0, or
  // softiwarp0 with SOFTRDMA_WIRE=iwarp).
  std::string device_name = "softrdma0";
  // SOFTRDMA_WIRE: "roce" (default): RoCEv2 in UDP; "iwarp": iWARP (RDMAP/DDP/MPA)
  // in TCP connections that librdmacm sets up (docs/decisions/iwarp.md). The
  // device then reports transport iWARP and node type RNIC, carries RC QPs only,
  // and takes no same-host path.
  bool iwarp = false;
  static bool iwarp_from_environment();
  // SOFTRDMA_ADDR: the local IPv4/IPv6 address RoCEv2 traffic uses (port 4791).
  // Empty: the host's address (transport/udp/host_address.h), shared with the
  // host's other processes, chosen when the device opens; with
  // SOFTRDMA_SHARE_ADDRESS=0, a loopback address of this process's own (127.x.y.z
  // from the pid), which only this host reaches.
  std::string address;
  // Set by OpenDevice when it chose `address` itself (SOFTRDMA_ADDR not set).
  bool address_is_default = false;
  // SOFTRDMA_PCAP: write every RoCEv2 packet sent and received to this pcap file.
  std::string pcap_path;
  // SOFTRDMA_FAULTS: impair the traffic (transport/fake/fault_settings.h), e.g.
  // "loss=0.05,dup=0.01,reorder=0.02,seed=7" — to test an application's error paths.
  std::string faults;
  // SOFTRDMA_TRANSPORT: "auto" (default) takes the same-host path to softrdma
  // processes of this host and user (docs/decisions/same-host.md) and UDP to the
  // rest; "udp" puts everything on the wire. SOFTRDMA_PCAP and SOFTRDMA_FAULTS
  // need packets: with either, "auto" means "udp".
  bool same_host = true;
  // SOFTRDMA_SHARE_ADDRESS: "1" (default): this RoCEv2 device shares its address
  // with the host's other processes of this user, as an RNIC serves every process
  // of its host (docs/decisions/host-rnic.md). "0": the address is this process's
  // alone (and with SOFTRDMA_ADDR unset, a loopback address of its own). "crossed":
  // shared, with each process's packets steered to another member, which hands
  // them over (bench/compare.sh measures the hand-over with it). iWARP's device
  // holds no UDP port and shares its address whatever this says.
  bool share_address = true;
  bool share_crossed = false;
  // Whether the device joins its address's group of processes (RoCEv2 only).
  bool joins_shared_address() const { return share_address && !iwarp; }
  // SOFTRDMA_PROGRESS: "thread" (default) runs the engine on its own thread;
  // "inline" makes progress only when the application polls.
  bool progress_thread = true;
  // SOFTRDMA_WINDOW: most unacknowledged packets per QP (1..4096): go-back-N's
  // and selective repeat's (at most the SACK's span); engine::DeviceConfig's.
  uint32_t max_unacked_packets = 64;
  uint32_t selective_window = 256;
  // SOFTRDMA_INITIAL_WINDOW: where the delay control's window starts (1..4096
  // packets); it doubles per round trip from there while the round trip stays low.
  uint32_t initial_window = 32;
  // SOFTRDMA_SELECTIVE_REPEAT: "negotiated" (default: when both ends of an RC
  // connection agreed through ECE), "always" (every RC QP; every peer must be
  // softrdma), "off" (IBA's go-back-N only; ECE offers nothing).
  // docs/decisions/selective-repeat.md.
  engine::SelectiveRepeatMode selective_repeat = engine::SelectiveRepeatMode::kNegotiated;
  // SOFTRDMA_CONGESTION: "dcqcn+delay" (default), "dcqcn", "delay" or "off".
  // DCQCN: RoCEv2 packets leave ECN-capable, CE marks are answered with CNPs, CNPs
  // cut the QP's rate. Delay (Swift): an RC requester's measured round trip bounds
  // its window. docs/decisions/congestion-control.md.
  bool dcqcn = true;
  bool delay_control = true;
  // SOFTRDMA_TARGET_DELAY_US: the queueing delay the delay control allows above the
  // base round trip (1..1000000; docs/decisions/congestion-control.md "Tuning the
  // delay": a software path's round trips jitter by hundreds of microseconds).
  uint32_t target_delay_us = 750;
  // SOFTRDMA_LINE_RATE_GBPS: where DCQCN starts a connection and recovers it to.
  uint32_t line_rate_gbps = 40;
  // SOFTRDMA_IDLE_PROBE_MS: an RC QP that has nothing outstanding and has heard
  // nothing from its peer for this many milliseconds probes it, so that a killed
  // peer is noticed (docs/decisions/retransmission.md); 0: never. 0..3600000.
  uint32_t idle_probe_ms = 1000;
  // SOFTRDMA_SHARED_PAGES_MB: MRs of at most this many MiB have their whole pages
  // moved onto a memory file that same-host peers map, so that their WRITEs,
  // READs, atomics and SENDs into them are loads and stores (docs/decisions/
  // same-host.md "Shared pages"); 0: never (cross-memory attach). 0..65536.
  uint32_t shared_pages_mb = 64;
  // SOFTRDMA_SYSFS_VIEW: "on" (default) or "off": whether `softrdma run` shows the
  // program a sysfs and /dev view describing the device (tools/run/).
  bool sysfs_view = true;

  static std::optional<Settings> from_environment(std::string& error);
  // SOFTRDMA_SYSFS_VIEW alone (`softrdma run` reads it whatever the others say).
  static std::optional<bool> sysfs_view_from_environment(std::string& error);
  // The address a device serves with SOFTRDMA_ADDR unset and sharing on: the
  // host's (transport/udp/host_address.h).
  static std::string host_address();
  // SOFTRDMA_ADDR's value in force, said for `softrdma status` and the doctor.
  std::string describe_address() const;
  std::string congestion_description() const;
  // (variable, value in force) for `softrdma status`.
  std::vector<std::pair<std::string, std::string>> describe() const;
};

}  // namespace softrdma::runtime
