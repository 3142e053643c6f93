// Touching application memory without trusting it to be mapped (issue 6, defect 1;
// docs/decisions/memory-faults.md). A registered buffer may be munmap'ed without
// ibv_dereg_mr; an RDMA NIC with ODP then fails the access with a remote access
// error, it does not bring the host down. softrdma reads and writes that memory from
// its own threads, so every such access goes through these routines: a fault inside
// one (SIGSEGV, SIGBUS) becomes a false return instead of killing the process.
//
// How: a SIGSEGV/SIGBUS handler, installed once, recognises a fault taken while the
// faulting thread is inside a guarded routine (a thread-local marker) and jumps
// back out of it (siglongjmp); any other fault goes on to the handler that was
// installed before (the application's, ASan's) or to the default action.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softrdma::engine {

// Installs the fault handler (once per process; later calls do nothing). Device
// construction calls it, so it is in place before any peer can reach memory.
void install_memory_fault_handler();

// memcpy that reports a fault on either side instead of dying. False: some bytes
// may have been copied, the rest not.
[[nodiscard]] bool guarded_copy(void* dst, const void* src, size_t n);

enum class AtomicOp : uint8_t { kCompareSwap, kFetchAdd, kStore };  // kStore: ATOMIC WRITE
// IBA 9.4.5 atomics on an 8-byte aligned word; `original` receives the value before
// the operation. False when the word's page is not mapped (or not writable).
[[nodiscard]] bool guarded_atomic(AtomicOp op, uint64_t* word, uint64_t compare,
                                  uint64_t swap_add, uint64_t& original);

// Faults turned into errors since the process started (for tests and status).
uint64_t guarded_faults();

}  // namespace softrdma::engine
