#include "traffic/fabric.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include "progress/loop.h"
#include "transport/fake/fault_injector.h"
#include "transport/pcap_writer.h"
#include "transport/udp/udp_transport.h"

namespace softrdma::traffic {

std::unique_ptr<Fabric> Fabric::open(const FabricOptions& options, std::string& error) {
  std::unique_ptr<Fabric> f(new Fabric());
  if (!f->start(options, error)) return nullptr;
  return f;
}

bool Fabric::start(const FabricOptions& options, std::string& error) {
  transport_ = transport::UdpTransport::open(transport::UdpConfig{}, error);
  if (!transport_) return false;
  if (!options.pcap.empty()) {
    transport_ = transport::open_capture(std::move(transport_), options.pcap, error);
    if (!transport_) return false;
  }
  const auto settings = transport::FaultSettings::parse(options.faults, error);
  if (!settings) return false;
  if (settings->any()) {
    auto injector = std::make_unique<transport::FaultInjector>(std::move(transport_), *settings);
    faults_ = injector.get();
    transport_ = std::move(injector);
  }
  device_ = std::make_unique<engine::Device>(engine::DeviceConfig{}, *transport_);
  int err = 0;
  pd_ = device_->alloc_pd(err);
  if (pd_ != nullptr) send_cq_ = device_->create_cq(int(options.send_cqe), err);
  if (send_cq_ != nullptr) recv_cq_ = device_->create_cq(int(options.recv_cqe), err);
  if (recv_cq_ == nullptr) {
    error = std::string("device set-up (PD/CQ): ") + std::strerror(err);
    return false;
  }
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) {
    error = std::string("eventfd: ") + std::strerror(errno);
    return false;
  }
  const int efd = event_fd_;
  auto notify = [efd] {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(efd, &one, sizeof one);
  };
  send_cq_->set_notify(notify);
  recv_cq_->set_notify(notify);

  engine::Device* dev = device_.get();
  progress::ProgressHooks hooks;
  hooks.progress = [dev] { return dev->progress(); };
  hooks.next_deadline_ns = [dev] { return int64_t(dev->next_deadline()); };
  hooks.fds = {transport_->rx_fd()};
  loop_ = std::make_unique<progress::ProgressLoop>(std::move(hooks));
  progress::ProgressLoop* loop = loop_.get();
  device_->set_wakeup([loop] { loop->wake(); });
  loop_->start();
  return true;
}

Fabric::~Fabric() {
  if (loop_) loop_->stop();
  if (device_) device_->set_wakeup(nullptr);
  loop_.reset();
  device_.reset();  // its CQs call the eventfd's notifier: close the fd after
  if (event_fd_ >= 0) close(event_fd_);
}

transport::Gid Fabric::gid() const {
  const auto& gids = device_->gids();
  return gids.size() > 1 ? gids[1] : gids[0];
}

std::string Fabric::describe() const { return transport_->describe(); }

void Fabric::arm_notify() {
  send_cq_->arm(false);
  recv_cq_->arm(false);
}

void Fabric::drain_notify() {
  uint64_t v;
  [[maybe_unused]] ssize_t n = read(event_fd_, &v, sizeof v);
}

std::map<std::string, uint64_t> Fabric::counters() const {
  std::map<std::string, uint64_t> out;
  device_->counters().for_each([&](const char* name, uint64_t v) { out[name] = v; });
  const transport::TransportCounters t = transport_->counters();
  out["transport.tx_packets"] = t.tx_packets;
  out["transport.rx_packets"] = t.rx_packets;
  out["transport.tx_errors"] = t.tx_errors;
  out["transport.rx_bad_icrc"] = t.rx_bad_icrc;
  out["transport.rx_truncated"] = t.rx_truncated;
  if (faults_ != nullptr) {
    const transport::FaultCounters fc = faults_->fault_counters();
    out["faults.tx_packets"] = fc.tx.packets;
    out["faults.tx_dropped"] = fc.tx.dropped;
    out["faults.tx_duplicated"] = fc.tx.duplicated;
    out["faults.tx_reordered"] = fc.tx.reordered;
    out["faults.tx_backlog_dropped"] = fc.tx.backlog_dropped;
  }
  return out;
}

}  // namespace softrdma::traffic
