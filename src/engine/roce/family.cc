#include "engine/roce/family.h"

#include <algorithm>

#include "engine/device.h"
#include "engine/qp.h"
#include "engine/rc/connection.h"
#include "engine/ud/datagram.h"

namespace softrdma::engine::roce {

RoceFamily::RoceFamily(Device& device, transport::Transport& primary)
    : device_(device), primary_(primary), receivers_{&primary}, tx_(device.counters()) {}

// IBA 9.8.4: UD is datagrams; RC, UC and XRC are connections (rc/connection.h).
std::unique_ptr<Protocol> RoceFamily::make_protocol(Qp& qp) {
  if (qp.type() == IBV_QPT_UD) return std::make_unique<ud::Datagram>(qp, *this);
  return std::make_unique<rc::RcConnection>(qp, *this);
}

void RoceFamily::forget(const Qp& qp) { std::erase(touched_, &qp); }

std::vector<int> RoceFamily::rx_fds() const {
  std::vector<int> fds;
  for (const transport::Transport* t : receivers_)
    if (t->rx_fd() >= 0) fds.push_back(t->rx_fd());
  return fds;
}

transport::Transport& RoceFamily::route(const transport::Gid& dst) {
  if (wire::gid_is_multicast(dst)) return primary_;  // the others carry no groups
  for (transport::Transport* t : extra_)
    if (t->reaches(dst)) return *t;
  return primary_;
}

void RoceFamily::add_transport(transport::Transport& extra) {
  extra_.push_back(&extra);
  receivers_.push_back(&extra);
}

}  // namespace softrdma::engine::roce
