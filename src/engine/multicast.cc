// Multicast groups of a device (docs/decisions/multicast.md): which UD QPs are
// attached to which group, and the transport's membership of the IP group, held
// while at least one QP is attached (as Soft-RoCE's rxe_mcast.c keeps an mcg).
#include <algorithm>
#include <cerrno>

#include "engine/device.h"

namespace softrdma::engine {

int Device::attach_mcast(Qp* qp, const Gid& group) {
  auto engine = hold_engine();
  if (!live_qps_.contains(qp)) return EINVAL;
  // ib_attach_mcast (the kernel's answer before any driver): multicast GIDs and
  // UD QPs only (ibv_attach_mcast(3) NOTES).
  if (!wire::gid_is_multicast(group) || qp->type() != IBV_QPT_UD) return EINVAL;
  auto it = mcast_groups_.find(group);
  if (it != mcast_groups_.end()) {
    // ibv_attach_mcast(3): attached several times, a QP still gets one copy.
    if (std::find(it->second.begin(), it->second.end(), qp) != it->second.end()) return 0;
    if (it->second.size() >= config_.limits.max_mcast_qp_attach) return EINVAL;
  } else if (mcast_groups_.size() >= config_.limits.max_mcast_grp) {
    return ENOMEM;
  }
  if (mcast_attachments_ >= config_.limits.max_total_mcast_qp_attach) return EINVAL;
  if (it == mcast_groups_.end()) {
    if (const int err = transport_.join_group(group); err != 0) return err;
    it = mcast_groups_.emplace(group, std::vector<Qp*>{}).first;
  }
  it->second.push_back(qp);
  ++mcast_attachments_;
  return 0;
}

int Device::detach_mcast(Qp* qp, const Gid& group) {
  auto engine = hold_engine();
  if (!live_qps_.contains(qp)) return EINVAL;
  auto it = mcast_groups_.find(group);
  // The kernel (uverbs' list of the QP's groups, rxe_detach_mcast) answers EINVAL
  // for a group the QP is not attached to.
  if (it == mcast_groups_.end()) return EINVAL;
  auto member = std::find(it->second.begin(), it->second.end(), qp);
  if (member == it->second.end()) return EINVAL;
  it->second.erase(member);
  --mcast_attachments_;
  if (it->second.empty()) {
    mcast_groups_.erase(it);
    transport_.leave_group(group);
  }
  return 0;
}

const std::vector<Qp*>* Device::multicast_members(const Gid& group) const {
  auto it = mcast_groups_.find(group);
  return it != mcast_groups_.end() ? &it->second : nullptr;
}

bool Device::attached_anywhere(const Qp* qp) const {
  if (mcast_attachments_ == 0) return false;
  return std::any_of(mcast_groups_.begin(), mcast_groups_.end(), [&](const auto& group) {
    return std::find(group.second.begin(), group.second.end(), qp) != group.second.end();
  });
}

}  // namespace softrdma::engine
