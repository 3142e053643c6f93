#include "engine/wqe.h"

#include "wire/psn.h"

namespace softrdma::engine {

void copy_recv_wr(const ibv_recv_wr& wr, RecvWqe& wqe, Sge* sges) {
  wqe = RecvWqe{};
  wqe.wr_id = wr.wr_id;
  for (int i = 0; i < wr.num_sge; ++i) {
    sges[i] = Sge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
    wqe.length += wr.sg_list[i].length;
  }
  wqe.sgl = SgeList{sges, uint32_t(wr.num_sge)};
}

uint32_t SendWqe::last_psn() const { return wire::psn_add(first_psn, int64_t(npackets) - 1); }

}  // namespace softrdma::engine
