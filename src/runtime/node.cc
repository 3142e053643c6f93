#include "runtime/node.h"

#include <cstdio>
#include <cstring>

#include "transport/fake/fault_injector.h"
#include "transport/pcap_writer.h"
#include "transport/udp/udp_transport.h"

namespace softrdma::runtime {

namespace {

// UDP, then capture closest to the wire, then faults on top (so the capture shows
// what really crossed the socket: an injected loss is not in the file).
std::unique_ptr<transport::Transport> open_transport(const Settings& s, std::string& error,
                                                     transport::FaultInjector*& faults) {
  transport::UdpConfig udp;
  udp.address = s.address;
  std::unique_ptr<transport::Transport> t = transport::UdpTransport::open(udp, error);
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

}  // namespace

std::unique_ptr<Node> Node::open(const Settings& settings, std::string& error) {
  std::unique_ptr<Node> node(new Node(settings));
  node->transport_ = open_transport(settings, error, node->faults_);
  if (!node->transport_) return nullptr;
  engine::DeviceConfig config;
  config.name = settings.device_name;
  node->status_ = StatusSegment::create(settings.device_name, node->transport_->describe());
  if (node->status_) config.counters = node->status_->counters();
  config.max_unacked_packets = settings.max_unacked_packets;
  config.idle_probe_interval_ns = int64_t(settings.idle_probe_ms) * 1'000'000;
  node->device_ = std::make_unique<engine::Device>(config, *node->transport_);
  if (node->status_) {
    StatusSegment* status = node->status_.get();
    node->device_->set_qp_observer([status](const engine::Qp& qp, bool gone) {
      uint8_t peer[16];
      std::memcpy(peer, qp.attr().ah_attr.grh.dgid.raw, sizeof peer);
      return status->update_qp(qp.qpn(), qp.attr().dest_qp_num, uint8_t(qp.type()),
                               uint8_t(qp.state()), peer, gone);
    });
  }
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
    hooks.progress = [device] { return device->progress(); };
    hooks.next_deadline_ns = [device] { return device->next_deadline(); };
    hooks.fds = {node->transport_->rx_fd()};
    node->loop_ = std::make_unique<progress::ProgressLoop>(std::move(hooks));
    progress::ProgressLoop* loop = node->loop_.get();
    device->set_wakeup([loop] { loop->wake(); });
    node->loop_->start();
  }
  return node;
}

Node::~Node() {
  if (loop_) loop_->stop();
  if (device_) device_->set_wakeup(nullptr);
  loop_.reset();
  device_.reset();
  transport_.reset();
}

bool Node::progress_inline() {
  return loop_ ? loop_->run_once() : device_->progress();
}

}  // namespace softrdma::runtime
