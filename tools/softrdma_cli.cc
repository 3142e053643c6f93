// softrdma: the command that runs verbs programs on softrdma and says what it is.
//
//   softrdma run [--no-sysfs-view] [--] CMD ARGS...
//                                   runs CMD with the build tree's lib/ (softrdma's
//                                   libibverbs.so.1 and the vendor stubs) first on
//                                   LD_LIBRARY_PATH, in a sysfs and /dev view that
//                                   describes the device (tools/run/mount_view.h;
//                                   off with the flag or SOFTRDMA_SYSFS_VIEW=off).
//                                   Nothing is installed anywhere.
//   softrdma env                    shell commands (eval "$(softrdma env)") that make
//                                   every later command of a shell or CI job use
//                                   softrdma's libraries, for jobs that cannot wrap
//                                   each command in `softrdma run`; without the sysfs
//                                   view, which only `run` can make.
//   softrdma doctor                 what this machine allows softrdma (namespaces,
//                                   cross-memory attach, /dev/shm, the port, rdma-core,
//                                   UCX and libfabric settings), found by trying it,
//                                   and what to change (doctor/doctor.h).
//   softrdma --version              the version (CMake's project version; also the
//                                   device's fw_ver, verbs/attributes.cc).
//   softrdma status                 the device, its addresses (GIDs), every setting
//                                   in force, then every softrdma process of the
//                                   host with its device, QPs and live counters
//                                   (each process runs its own engine; their status
//                                   segments, runtime/status_segment.h).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "doctor/doctor.h"
#include "run/device_query.h"
#include "run/mount_view.h"
#include "run/sysfs_files.h"
#include "runtime/open_device.h"
#include "runtime/settings.h"
#include "runtime/status_segment.h"
#include "softrdma_version.h"

namespace {

namespace fs = std::filesystem;

int usage(FILE* out) {
  std::fprintf(out,
               "usage: softrdma run [--no-sysfs-view] [--] CMD [ARGS...]\n"
               "                                  run a verbs program on softrdma\n"
               "       softrdma status            device, addresses, settings, counters\n"
               "       softrdma env               shell settings: eval \"$(softrdma env)\"\n"
               "       softrdma doctor            what this machine allows, what to change\n"
               "       softrdma --version         the version of softrdma\n"
               "Settings are environment variables (docs/configuration.md).\n");
  return out == stdout ? 0 : 2;
}

// Where softrdma's libraries are: lib/ beside this program's directory in a build
// tree (build/tools/softrdma -> build/lib), so that a moved tree keeps working;
// lib/softrdma/ (SOFTRDMA_INSTALL_LIB_DIR) in an installation (PREFIX/bin/softrdma
// -> PREFIX/lib/.../softrdma); else the build tree this program was built in.
fs::path library_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path up = exe.parent_path().parent_path();
    for (const fs::path& beside : {up / "lib", up / SOFTRDMA_INSTALL_LIB_DIR})
      if (fs::exists(beside / "libibverbs.so.1")) return beside;
  }
  return SOFTRDMA_BUILD_LIB_DIR;
}

void prepend(const char* variable, const std::string& value, char separator) {
  const char* old = std::getenv(variable);
  std::string v = value;
  if (old != nullptr && *old != '\0') v += separator + std::string(old);
  setenv(variable, v.c_str(), 1);
}

// The sysfs and /dev view of the device (docs/decisions/ucx.md), unless turned
// off; where it cannot be made, one line says why and the program runs without it.
void offer_sysfs_view(const fs::path& lib, bool wanted) {
  std::string error;
  const std::optional<bool> setting = softrdma::runtime::Settings::sysfs_view_from_environment(error);
  if (setting && (!*setting || !wanted)) return;
  if (setting) {
    const auto device = softrdma::tools::query_device(lib / "libibverbs.so.1", error);
    if (device && softrdma::tools::enter_view(softrdma::tools::class_files(*device),
                                              device->dev_name, error))
      return;
  }
  std::fprintf(stderr,
               "softrdma: running without the sysfs view (%s); SOFTRDMA_SYSFS_VIEW in "
               "docs/configuration.md\n",
               error.c_str());
}

// `text` in single quotes for a POSIX shell (a quote inside becomes '\'').
std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// What `run` puts in the environment, as shell commands that keep what the
// variables held before (after softrdma's own).
int env() {
  const fs::path lib = library_dir();
  if (!fs::exists(lib / "libibverbs.so.1")) {
    std::fprintf(stderr, "softrdma: %s has no libibverbs.so.1: build the project first\n",
                 lib.c_str());
    return 1;
  }
  std::printf("export LD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n",
              shell_quoted(lib.string()).c_str());
#ifdef SOFTRDMA_ASAN_RUNTIME
  std::printf("export LD_PRELOAD=%s${LD_PRELOAD:+ $LD_PRELOAD}\n",
              shell_quoted(SOFTRDMA_ASAN_RUNTIME).c_str());
#endif
  std::printf("# softrdma %s: verbs programs started from here use softrdma (%s).\n"
              "# Without the sysfs view of `softrdma run`: programs that read\n"
              "# /sys/class/infiniband themselves (UCX) need `softrdma run`.\n",
              softrdma::kVersion, lib.c_str());
  return 0;
}

int run(int argc, char** argv) {
  int first = 0;
  bool view = true;
  while (first < argc) {
    if (std::strcmp(argv[first], "--no-sysfs-view") == 0) {
      view = false;
      ++first;
      continue;
    }
    if (std::strcmp(argv[first], "--") == 0) ++first;
    break;
  }
  if (first >= argc) return usage(stderr);
  const fs::path lib = library_dir();
  if (!fs::exists(lib / "libibverbs.so.1")) {
    std::fprintf(stderr, "softrdma: %s has no libibverbs.so.1: build the project first\n",
                 lib.c_str());
    return 1;
  }
  prepend("LD_LIBRARY_PATH", lib.string(), ':');
#ifdef SOFTRDMA_ASAN_RUNTIME
  // This build's library is sanitized: ASan must be the first library in the
  // process, which an ordinary (unsanitized) program does not arrange.
  prepend("LD_PRELOAD", SOFTRDMA_ASAN_RUNTIME, ' ');
#endif
  offer_sysfs_view(lib, view);
  execvp(argv[first], argv + first);
  std::fprintf(stderr, "softrdma: cannot run %s: %s\n", argv[first], std::strerror(errno));
  return 127;
}

std::string gid_text(const softrdma::transport::Gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.data(), text, sizeof text);
  return text;
}

softrdma::transport::Gid to_gid(const uint8_t (&raw)[16]) {
  softrdma::transport::Gid gid;
  std::memcpy(gid.data(), raw, gid.size());
  return gid;
}

const char* qp_state_name(uint8_t state) {
  static const char* const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return state < 7 ? names[state] : "?";
}

const char* qp_type_name(uint8_t type) {
  switch (type) {
    case IBV_QPT_RC: return "RC";
    case IBV_QPT_UC: return "UC";
    case IBV_QPT_UD: return "UD";
    case IBV_QPT_XRC_SEND: return "XRC_SEND";
    case IBV_QPT_XRC_RECV: return "XRC_RECV";
    default: return "?";
  }
}

// A connected QP's path is chosen at RTR (the status row's `path`). A UD QP's is
// chosen per destination (docs/decisions/same-host.md, "UD"): its row shows the
// paths its sends took so far. An XRC receive QP sends no request: its peer's
// requester chooses.
const char* qp_path_name(const softrdma::runtime::StatusReport::Qp& q) {
  if (q.type == IBV_QPT_XRC_RECV) return "-";
  if (q.type != IBV_QPT_UD) return q.path != 0 ? "host" : "udp";
  if (q.host_operations != 0) return q.tx_packets != 0 ? "host+udp" : "host";
  return q.tx_packets != 0 ? "udp" : "-";
}

// Every other softrdma process of the host, from its status segment: device,
// address, QPs, counters that are not zero (like `rdma statistic`). The stale
// segments removed are the reader's and those the device opened for this command
// removed first (issue 27 finding 6: it said 0 after the open had removed them).
void print_processes(int removed_by_open) {
  int stale = 0;
  const auto reports = softrdma::runtime::read_status_segments(stale);
  std::printf("\nsoftrdma processes of this host (live counters; stale segments removed: %d)\n",
              stale + removed_by_open);
  for (const auto& r : reports) {
    if (r.pid == getpid()) continue;
    std::printf("process %d  device %s  %s  softrdma %s\n", r.pid, r.device.c_str(),
                r.address.c_str(), r.version.c_str());
    for (const auto& q : r.qps) {
      // The rate DCQCN holds the QP to (docs/decisions/congestion-control.md).
      // and the window the delay control allows (delay_control.h).
      const std::string rate =
          q.rate_mbps == 0 ? "line" : std::to_string(q.rate_mbps) + "Mb/s";
      // The round trip it answers: the latest, the base and the target, in us.
      char window[32] = "-", rtt[80] = "-";
      if (q.window_hundredths != 0) {
        std::snprintf(window, sizeof window, "%.2f", double(q.window_hundredths) / 100);
        std::snprintf(rtt, sizeof rtt, "%lluus (base %llu, target %llu)",
                      (unsigned long long)q.rtt_us, (unsigned long long)q.base_rtt_us,
                      (unsigned long long)q.target_us);
      }
      std::printf("  qp %u  type %s  state %s  dest_qp %u  peer %s  path %s  tx %llu  rx %llu  "
                  "retx %llu  host_ops %llu  rate %s  window %s  rtt %s  cnps %llu\n",
                  q.qpn, qp_type_name(q.type), qp_state_name(q.state), q.dest_qpn,
                  gid_text(to_gid(q.peer)).c_str(), qp_path_name(q), (unsigned long long)q.tx_packets,
                  (unsigned long long)q.rx_packets, (unsigned long long)q.retransmitted_packets,
                  (unsigned long long)q.host_operations, rate.c_str(), window, rtt,
                  (unsigned long long)q.cnps_received);
    }
    for (const auto& [name, value] : r.counters)
      if (value != 0) std::printf("  engine.%-26s %llu\n", name.c_str(), (unsigned long long)value);
    // Issue 14 defect 5: what the transport dropped (bad ICRC, truncated, refused).
    for (const auto& [name, value] : r.transport_counters)
      if (value != 0) std::printf("  udp.%-29s %llu\n", name.c_str(), (unsigned long long)value);
  }
}

int status() {
  std::string error;
  auto settings = softrdma::runtime::Settings::from_environment(error);
  if (!settings) {
    std::fprintf(stderr, "softrdma: %s\n", error.c_str());
    return 1;
  }
  auto node = softrdma::runtime::OpenDevice::open(*settings, error);
  if (!node) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  auto& device = node->device();
  // iWARP's QPs speak on the TCP connections librdmacm makes; the address is the
  // datagram transport's (docs/decisions/iwarp.md).
  const softrdma::engine::FamilyTraits& family = device.family().traits();
  std::printf("device      %s (port 1, %s %s)\n", device.config().name.c_str(),
              std::string(family.wire_name).c_str(), node->transport().describe().c_str());
  std::printf("library     %s/libibverbs.so.1\n", library_dir().c_str());
  const auto& gids = device.gids();
  for (size_t i = 0; i < gids.size(); ++i) {
    std::printf("GID[%zu]      %s (%s)\n", i, gid_text(gids[i]).c_str(),
                std::string(family.gid_type).c_str());
  }
  std::printf("\nsettings (environment; docs/configuration.md)\n");
  for (const auto& [variable, value] : settings->describe()) {
    std::printf("  %-18s %s\n", variable.c_str(), value.c_str());
  }
  std::printf("\ncounters of this freshly opened device (per process: each process that\n"
              "opens the device runs its own engine and counts its own traffic)\n");
  device.counters().for_each([](const char* name, uint64_t value) {
    std::printf("  engine.%-26s %llu\n", name, (unsigned long long)value);
  });
  if (const auto* segment = node->status()) {
    segment->transport_counters()->for_each([](const char* name, uint64_t value) {
      std::printf("  udp.%-29s %llu\n", name, (unsigned long long)value);
    });
  }
  print_processes(node->stale_segments_removed());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  const std::string command = argv[1];
  if (command == "run") return run(argc - 2, argv + 2);
  if (command == "status") return status();
  if (command == "env") return env();
  if (command == "doctor") return softrdma::tools::print_findings(
      softrdma::tools::examine(library_dir()), stdout);
  if (command == "--version" || command == "version") {
    std::printf("softrdma %s\n", softrdma::kVersion);
    return 0;
  }
  if (command == "help" || command == "--help" || command == "-h") return usage(stdout);
  std::fprintf(stderr, "softrdma: unknown command \"%s\"\n", command.c_str());
  return usage(stderr);
}
