#include "runtime/open_device.h"

#include <sys/stat.h>

#include <array>
#include <cstdio>
#include <cstring>

#include "engine/iwarp/family.h"
#include "engine/roce/family.h"
#include "runtime/shared_address.h"
#include "runtime/status_registry.h"
#include "transport/fake/fault_injector.h"
#include "transport/pcap_writer.h"
#include "transport/tcp/tcp_streams.h"
#include "transport/udp/address_only.h"
#include "transport/udp/udp_socket.h"
#include "transport/udp/udp_transport.h"
#include "wire/ip_udp.h"

namespace softrdma::runtime {

namespace {

// UDP, then capture closest to the wire, then faults on top (so the capture shows
// what really crossed the socket: an injected loss is not in the file).
// `address_refused`: what failed was the address (its port held, not this host's),
// not a setting of capture or faults.
std::unique_ptr<transport::Transport> open_transport(const Settings& s, std::string& error,
                                                     transport::FaultInjector*& faults,
                                                     StatusSegment* status,
                                                     SharedAddress* shared,
                                                     bool& address_refused,
                                                     transport::UdpTransport*& udp_out) {
  transport::UdpConfig udp;
  udp.address = s.address;
  udp.ecn = s.dcqcn;
  if (shared != nullptr) udp.shared = &shared->hooks();
  // Issue 14 defect 5: the transport counts its drops where `softrdma status` reads.
  if (status != nullptr) udp.counters = status->transport_counters();
  // iWARP speaks over TCP: its device holds its address, no UDP port
  // (docs/decisions/host-rnic.md), so other processes may share the address.
  std::unique_ptr<transport::Transport> t;
  if (s.iwarp) {
    t = transport::AddressOnlyTransport::open(udp, error);
  } else {
    auto roce = transport::UdpTransport::open(udp, error);
    if (roce && shared != nullptr) shared->start(*roce);
    udp_out = roce.get();
    t = std::move(roce);
  }
  address_refused = t == nullptr;
  if (!t) return nullptr;
  if (!s.pcap_path.empty()) {
    t = transport::open_capture(std::move(t), s.pcap_path, error);
    if (!t) return nullptr;
  }
  if (!s.faults.empty()) {
    auto settings = transport::FaultSettings::parse(s.faults, error);
    if (!settings) return nullptr;
    if (settings->any()) {
      auto injector = std::make_unique<transport::FaultInjector>(std::move(t), *settings);
      faults = injector.get();
      t = std::move(injector);
    }
  }
  return t;
}

// A process that exits without closing its device removes its node segment's
// names too (status_registry.h).
void register_node_names(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    struct stat st {};
    if (lstat(name.c_str(), &st) == 0) status_registry::add(name, st.st_dev, st.st_ino);
  }
}

}  // namespace

std::unique_ptr<OpenDevice> OpenDevice::open(const Settings& settings, std::string& error) {
  std::unique_ptr<OpenDevice> node(new OpenDevice(settings));
  // Segments left by this user's processes that were killed (no exit handler ran:
  // decisions/status-segment-safety.md), then this one's segment first: the
  // transport counts into it from its first packet.
  node->stale_removed_ = remove_stale_status_segments();
  // And the host registries of shared addresses whose processes were all killed.
  node->stale_removed_ += samehost::HostRegistry::remove_abandoned();
  node->status_ = StatusSegment::create(settings.device_name);
  if (!node->open_wire(error)) return nullptr;
  const Settings& chosen = node->settings_;  // with the address the device serves
  engine::DeviceConfig config;
  node->open_same_host();
  if (node->shared_) {
    SharedAddress* shared = node->shared_.get();
    samehost::Host* host = node->host_.get();
    // A block taken later names this process's node segment too (peers find a
    // QPN's process by its block, host-rnic.md).
    config.take_qpn_block = [shared, host] {
      const uint32_t block = shared->take_qpn_block();
      if (block != 0 && host != nullptr) register_node_names(host->node().add_block(block));
      return block;
    };
  }
  config.name = settings.device_name;
  if (node->status_) {
    node->status_->set_address((chosen.iwarp ? "iWARP over TCP, address " : "") +
                               node->transport_->describe());
    config.counters = node->status_->counters();
  }
  config.host = node->host_.get();
  config.max_unacked_packets = settings.max_unacked_packets;
  config.selective_window = settings.selective_window;
  config.initial_window = settings.initial_window;
  config.selective_repeat = settings.selective_repeat;
  config.dcqcn = settings.dcqcn;
  config.delay_control = settings.delay_control;
  config.target_queueing_ns = int64_t(settings.target_delay_us) * 1'000;
  config.line_rate_bytes_per_ns = double(settings.line_rate_gbps) / 8;
  config.idle_probe_interval_ns = int64_t(settings.idle_probe_ms) * 1'000'000;
  config.shared_pages_max_bytes = uint64_t(settings.shared_pages_mb) << 20;
  engine::FamilyMaker family = engine::roce::RoceFamily::maker();
  if (settings.iwarp) {
    // iWARP (docs/decisions/iwarp.md): QPs speak on TCP connections that librdmacm
    // hands over; the transport only holds the address and GID table.
    transport::tcp::CloseTiming timing;
    timing.exit_waits = settings.progress_thread;  // the loop sends held FINs at exit
    // SOFTRDMA_IDLE_PROBE_MS is the idle spell before a silent peer is probed, for
    // a stream (TCP keepalive, whole seconds) as for a RoCE QP; 0: never.
    transport::tcp::PeerLiveness liveness;
    liveness.idle_s = int((settings.idle_probe_ms + 999) / 1000);
    node->streams_ = transport::tcp::TcpStreams::open(node->transport_->local_gid(), error,
                                                      timing, liveness);
    if (!node->streams_) return nullptr;
    family = engine::iwarp::IwarpFamily::maker(*node->streams_);
  }
  node->device_ = std::make_unique<engine::Device>(config, *node->transport_, family);
  OpenDevice* raw = node.get();
  node->device_->set_qp_observer(
      [raw](const engine::Qp& qp, bool gone) { return raw->observe_qp(qp, gone); });
  node->watch_addresses();
  if (!settings.progress_thread) {
    // Issue 6 defect 7: the mode is kept for processes that always poll, and says
    // what it costs (docs/configuration.md).
    std::fprintf(stderr,
                 "softrdma: SOFTRDMA_PROGRESS=inline: nothing is served while no thread "
                 "polls a CQ; RDMA READ/WRITE/ATOMIC to this process then fail at the "
                 "peer (IBV_WC_RETRY_EXC_ERR)\n");
  }
  if (settings.progress_thread) {
    engine::Device* device = node->device_.get();
    progress::ProgressHooks hooks;
    // The loop takes the engine's own lock around each turn (one owner, one lock).
    hooks.turn_lock = &device->engine_lock();
    hooks.progress = [device] { return device->progress_held(engine::Device::Turner::kLoop); };
    hooks.poll_progress = [device] {
      return device->progress_held(engine::Device::Turner::kPoller);
    };
    hooks.after_progress = [raw] { raw->after_turn(); };
    hooks.work_left = [device] { return device->doorbells_pending(); };
    hooks.next_deadline_ns = [device] { return device->next_deadline(); };
    hooks.fds = device->family().rx_fds();  // the wire family's transports
    node->loop_ = std::make_unique<progress::ProgressLoop>(std::move(hooks));
    progress::ProgressLoop* loop = node->loop_.get();
    device->set_wakeup([loop] { loop->wake(); });
    if (node->host_) {
      // Peers wake this loop by its own protocol, through the segment (same-host.md).
      loop->share_wake_word(&node->host_->node().header().loop_wake);
      node->host_->set_doorbell(loop->wake_fd());
    }
    node->loop_->start();
  }
  return node;
}

// DESIGN.md §6, docs/decisions/host-rnic.md "Defaults": with SOFTRDMA_ADDR unset
// the device serves the host's address, shared with the host's other processes.
// Where it cannot (another user's processes hold it: one user per SO_REUSEPORT
// group; or another program holds its port 4791), this process takes a loopback
// address of its own, as the first engine did for every process, and says so once.
bool OpenDevice::open_wire(std::string& error) {
  if (settings_.address.empty() && settings_.share_address) {
    settings_.address = Settings::host_address();
    settings_.address_is_default = true;
  }
  bool address_refused = false;
  if (open_wire_on_address(error, address_refused)) return true;
  if (!settings_.address_is_default || !address_refused) return false;
  const std::string why = error.rfind("softrdma: ", 0) == 0 ? error.substr(10) : error;
  samehost::say_once("the host's address " + settings_.address + " cannot be shared with " +
                     "this process (" + why + "); it uses a loopback address of its own, " +
                     "which other hosts cannot reach (docs/configuration.md, SOFTRDMA_ADDR)");
  shared_.reset();
  settings_.address.clear();
  settings_.address_is_default = false;
  settings_.share_address = false;
  settings_.share_crossed = false;
  error.clear();
  return open_wire_on_address(error, address_refused);
}

bool OpenDevice::open_wire_on_address(std::string& error, bool& address_refused) {
  address_refused = true;
  if (settings_.joins_shared_address() && !join_shared_address(error)) return false;
  transport_ = open_transport(settings_, error, faults_, status_.get(), shared_.get(),
                              address_refused, udp_);
  if (!transport_) udp_ = nullptr;  // destroyed with what failed to wrap it
  return transport_ != nullptr;
}

// docs/decisions/host-rnic.md: this process's place among the address's others.
bool OpenDevice::join_shared_address(std::string& error) {
  const std::optional<wire::Gid> gid = transport::udp::parse_device_address(settings_.address, error);
  if (!gid) return false;
  shared_ = SharedAddress::join(*gid, error, settings_.share_crossed);
  return shared_ != nullptr;
}

void OpenDevice::open_same_host() {
  // iWARP's QPs take no same-host path (they are TCP connections librdmacm hands
  // over): no node segment, which would also be one process's per address.
  if (!settings_.same_host || settings_.iwarp) return;
  std::string why;
  const std::vector<wire::Gid> gids = transport_->local_gids();
  // On a shared address its processes are told apart by their QPN blocks.
  std::vector<uint32_t> blocks;
  if (shared_) blocks.push_back(shared_->slot());
  host_ = samehost::Host::open(gids, why, samehost::kNodeDirectory, blocks);
  if (!host_) {
    samehost::say_once("no same-host path (" + why + "); every peer is reached by UDP");
    return;
  }
  stale_removed_ += host_->stale_removed_at_open();
  // A same-host peer found dead leaves its status segment too (it ran no exit
  // handler): removed at once, so a killed peer leaves nothing in /dev/shm.
  host_->set_on_peer_gone([] { remove_stale_status_segments(); });
  register_node_names(host_->node().names());
}

// Issue 14 defect 12 (docs/decisions/gid-table.md, "Addresses that come and go"):
// an IPv4 address off loopback may get its interface's link-local address (GID 0)
// after the device opened, and lose it. A loopback or IPv6 device's table never
// changes: no watcher. Without one (netlink refused), the table stays as opened.
void OpenDevice::watch_addresses() {
  const std::vector<wire::Gid>& gids = device_->gids();
  if (!wire::gid_is_ipv4(gids.back()) || (wire::gid_to_ipv4(gids.back()) >> 24) == 127) return;
  engine::Device* device = device_.get();
  std::string error;
  address_watcher_ = AddressWatcher::start([device] { device->refresh_gids(); }, error);
  if (!address_watcher_) {
    std::fprintf(stderr, "%s; the GID table will not follow address changes\n", error.c_str());
    return;
  }
  device->refresh_gids();  // what changed between the device's opening and the watch
}

OpenDevice::~OpenDevice() {
  address_watcher_.reset();  // before the device it calls
  if (loop_) loop_->stop();
  if (device_) device_->set_wakeup(nullptr);
  loop_.reset();
  device_.reset();
  streams_.reset();
  if (host_) {
    for (const std::string& name : host_->node().names()) {
      dev_t dev;
      ino_t ino;
      status_registry::remove(name, dev, ino);
    }
  }
  host_.reset();
  hand_over_what_is_queued();
  transport_.reset();
  // After the socket closed: the others probe again once this slot is free, and
  // must not find this socket still in the group.
  shared_.reset();
}

// docs/decisions/host-rnic.md, "Leaving": the kernel may have queued on this
// process's socket packets of other processes of the address (hashed here while
// their indices were being learned after another member left); closing the socket
// would drop them and their senders would wait a retransmission timeout, or lose a
// UD datagram for good. The engine is gone: the transport's receive path hands
// over what is others' and what is this process's is dropped, as its QPs are.
void OpenDevice::hand_over_what_is_queued() {
  if (!shared_ || !transport_ || udp_ == nullptr) return;
  std::array<transport::RxPacket, 32> packets;
  for (int burst = 0; burst < 64 && udp_->socket_has_data(); ++burst) udp_->rx_burst(packets);
}

void OpenDevice::close_after_fork() {
  if (udp_ != nullptr) udp_->close_after_fork();
  if (shared_) shared_->close_after_fork();
}

bool OpenDevice::progress_inline() {
  return loop_ ? loop_->run_once() : turn(engine::Device::Turner::kLoop);
}

engine::QpCounters* OpenDevice::observe_qp(const engine::Qp& qp, bool gone) {
  if (!gone && qp.state() == IBV_QPS_ERR && qp.type() == IBV_QPT_RC && qp_error_listener_) {
    std::lock_guard lock(qp_errors_mutex_);
    qp_errors_.push_back(qp.qpn());
    qp_errors_pending_.store(true, std::memory_order_release);
  }
  if (!status_) return nullptr;
  StatusQpUpdate row{qp.qpn(), qp.attr().dest_qp_num, uint8_t(qp.type()), uint8_t(qp.state()),
                     {}, uint8_t(qp.on_same_host() ? 1 : 0)};
  std::memcpy(row.peer, qp.attr().ah_attr.grh.dgid.raw, sizeof row.peer);
  return status_->update_qp(row, gone);
}

bool OpenDevice::turn(engine::Device::Turner who) {
  const bool worked = device_->progress(who);
  after_turn();
  return worked;
}

void OpenDevice::after_turn() {
  if (shared_) shared_->after_turn();
  // One atomic load per turn; the list is taken only when a QP entered Error.
  if (qp_errors_pending_.load(std::memory_order_acquire)) report_qp_errors();
}

[[gnu::cold]] void OpenDevice::report_qp_errors() {
  std::vector<uint32_t> errors;
  {
    std::lock_guard lock(qp_errors_mutex_);
    errors.swap(qp_errors_);
    qp_errors_pending_.store(false, std::memory_order_relaxed);
  }
  for (uint32_t qpn : errors) qp_error_listener_(qpn);
}

}  // namespace softrdma::runtime
