// What every engine pair fixture (rc_fixture, iwarp_fixture, path_pair) does to
// its QPs and CQs the same way: one receive posted, completions drained.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

#include "engine/cq.h"
#include "engine/qp.h"

namespace softrdma::engine {

// One receive WQE of `length` bytes at `addr` under `lkey`: 0 or the errno.
inline int post_one_recv(Qp& qp, uint64_t addr, uint32_t length, uint32_t lkey, uint64_t wr_id) {
  ibv_sge sge{addr, length, lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_recv_wr* bad = nullptr;
  return qp.post_recv(&wr, &bad);
}

// Appends what `cq` holds now to `got`; true once `got` has `count`.
inline bool drain_until(Cq& cq, std::vector<ibv_wc>& got, size_t count) {
  ibv_wc wc[16];
  for (int n; (n = cq.poll(16, wc)) > 0;) got.insert(got.end(), wc, wc + n);
  return got.size() >= count;
}

}  // namespace softrdma::engine
