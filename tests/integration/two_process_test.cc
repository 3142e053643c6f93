// Two processes over UDP loopback (DESIGN.md §8): softrdma-demo in its test mode
// starts a server and a client process, each with its own software RNIC on its own
// 127.x.y.z address, connects N RC QPs and moves randomly sized messages (1 B to
// 8 MiB, every RC operation, both directions, several QPs, several work requests
// outstanding, scatter/gather lists) while each process's fault injector drops,
// duplicates and reorders what it transmits. The processes check every byte
// (regenerated contents, CRC-32 exchanged for one-sided operations) and every
// completion; this test asserts their verdict and what the run must have
// exercised. No timing is asserted.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

struct ProgramRun {
  int exit_code = -1;
  std::vector<std::string> lines;  // stdout
};

// Runs `argv`, collecting its stdout (its stderr is the test's, for the log).
ProgramRun run_program(const std::vector<std::string>& argv) {
  ProgramRun r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  close(fds[0]);
  if (rc != 0) return r;
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) r.lines.push_back(line);
  return r;
}

// The fields of the first line starting with `kind ` (key=value pairs).
std::map<std::string, std::string> fields_of(const ProgramRun& r, const std::string& kind,
                                             const std::string& must_contain = "") {
  std::map<std::string, std::string> f;
  for (const std::string& line : r.lines) {
    if (line.rfind(kind + " ", 0) != 0 || line.find(must_contain) == std::string::npos) continue;
    std::istringstream in(line);
    std::string tok;
    while (in >> tok)
      if (auto eq = tok.find('='); eq != std::string::npos)
        f[tok.substr(0, eq)] = tok.substr(eq + 1);
    break;
  }
  return f;
}

uint64_t num(const std::map<std::string, std::string>& f, const std::string& k) {
  auto it = f.find(k);
  return it == f.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
}

// Message counts scale down in sanitizer builds (SOFTRDMA_INTEGRATION_SCALE, also
// from the environment); the 8 MiB messages of every op stay.
std::string scale_arg() {
  const char* env = std::getenv("SOFTRDMA_INTEGRATION_SCALE");
  return std::string("--scale=") + (env != nullptr ? env : SOFTRDMA_INTEGRATION_SCALE);
}

void dump(const ProgramRun& r) {
  for (const std::string& line : r.lines) std::printf("%s\n", line.c_str());
}

constexpr uint64_t kMaxMessage = 8u << 20;
const char* const kOps[] = {"SEND", "SEND_IMM", "WRITE",    "WRITE_IMM",
                            "READ", "CMP_SWAP", "FETCH_ADD"};

struct LossCase {
  const char* name;
  const char* loss;
  uint64_t seed;
  const char* mtu;  // path MTUs vary across the cases: segmentation at several sizes
};

void PrintTo(const LossCase& c, std::ostream* os) { *os << c.name; }

class TwoProcessLoss : public ::testing::TestWithParam<LossCase> {};

// Every RC operation, 1 B to 8 MiB, 4 QPs both ways, loss + 1 % duplication +
// 2 % reordering on both processes' transmit sides: all bytes and completions check.
TEST_P(TwoProcessLoss, EveryByteAndCompletionChecks) {
  const LossCase& c = GetParam();
  const ProgramRun r =
      run_program({SOFTRDMA_DEMO, "--mode=test", "--qps=4", "--seed=" + std::to_string(c.seed),
                   std::string("--loss=") + c.loss, std::string("--mtu=") + c.mtu, "--dup=0.01",
                   "--reorder=0.02", scale_arg(), "--time-limit=250"});
  const auto s = fields_of(r, "summary");
  if (r.exit_code != 0 || s.empty() || s.at("status") != "PASS") dump(r);
  ASSERT_EQ(r.exit_code, 0);
  ASSERT_FALSE(s.empty()) << "no summary line";
  EXPECT_EQ(s.at("status"), "PASS");
  EXPECT_EQ(num(s, "errors"), 0u);
  EXPECT_GT(num(s, "completions"), 0u);
  EXPECT_GT(num(s, "crc_matches"), 0u);
  EXPECT_GT(num(s, "atomics"), 0u);
  // Every byte that moved was compared with regenerated contents somewhere.
  const uint64_t atomic_bytes = 8 * (num(s, "msgs_CMP_SWAP") + num(s, "msgs_FETCH_ADD"));
  EXPECT_GE(num(s, "bytes_compared"), num(s, "bytes") - atomic_bytes);
  for (const char* op : kOps) EXPECT_GT(num(s, std::string("msgs_") + op), 0u) << op;
  const double loss = std::strtod(c.loss, nullptr);
  if (loss <= 0.01) {
    for (const char* op : {"SEND", "SEND_IMM", "WRITE", "WRITE_IMM", "READ"})
      EXPECT_EQ(num(s, std::string("max_") + op), kMaxMessage) << op;
  }
  // The faults happened and were recovered from.
  if (loss > 0) {
    EXPECT_GT(num(s, "dropped"), 0u);
    EXPECT_GT(num(s, "retransmitted"), 0u);
  } else {
    EXPECT_EQ(num(s, "dropped"), 0u);
  }
  EXPECT_GT(num(s, "duplicated"), 0u);
  EXPECT_GT(num(s, "reordered"), 0u);
  EXPECT_EQ(num(s, "bad_icrc"), 0u);
}

INSTANTIATE_TEST_SUITE_P(Faults, TwoProcessLoss,
                         ::testing::Values(LossCase{"Loss0", "0", 11, "4096"},
                                           LossCase{"Loss1", "0.01", 12, "1024"},
                                           LossCase{"Loss5", "0.05", 13, "2048"},
                                           LossCase{"Loss10", "0.10", 14, "4096"}),
                         [](const auto& info) { return std::string(info.param.name); });

// The demo's own phases (every op alone at 64 B, 64 KiB and 8 MiB, then a mix) at
// a small scale: the table has a row for every op and the run passes.
TEST(TwoProcessDemo, EveryOperationHasARow) {
  const ProgramRun r = run_program({SOFTRDMA_DEMO, "--scale=0.02", "--qps=2", "--time-limit=250"});
  const auto s = fields_of(r, "summary");
  if (r.exit_code != 0) dump(r);
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(s.at("status"), "PASS");
  for (const char* op : kOps) {
    bool row = false;
    for (const std::string& line : r.lines)
      row |= line.find(std::string(op) + "/") == 0;  // e.g. "READ/64KiB   READ ..."
    EXPECT_TRUE(row) << "no table row for " << op;
  }
}

// The checks can fail: with --inject-data-errors each process spoils one received
// SEND, one READ result and one WRITE target range before checking them, and the
// run must report those errors and fail.
TEST(TwoProcessDemo, CorruptedDataIsDetected) {
  const ProgramRun r = run_program({SOFTRDMA_DEMO, "--mode=test", "--qps=2", "--max-size=65536",
                                    "--scale=0.2", "--inject-data-errors", "--time-limit=250"});
  const auto s = fields_of(r, "summary");
  ASSERT_FALSE(s.empty()) << "no summary line";
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(s.at("status"), "FAIL");
  // Per process: SEND bytes, READ bytes + READ CRC, WRITE bytes + WRITE CRC.
  EXPECT_GE(num(s, "errors"), 2u * 5u);
}

// A capture of a run with loss, duplication and reordering (the client's packets,
// both directions, as they were on the wire) decodes in tshark without a malformed
// packet, and every packet's ICRC checks (scripts/check_capture.sh recomputes it
// independently of softrdma's code). The capture holds every packet the client's
// socket sent and received.
TEST(TwoProcessCapture, TsharkDecodesEveryPacketAndEveryIcrcChecks) {
  const std::string pcap = (std::filesystem::temp_directory_path() /
                            ("softrdma_integration_" + std::to_string(getpid()) + ".pcap"))
                               .string();
  const ProgramRun r = run_program({SOFTRDMA_DEMO, "--mode=test", "--qps=2", "--max-size=262144",
                                    "--scale=0.1", "--loss=0.01", "--dup=0.01", "--reorder=0.02",
                                    "--pcap=" + pcap, "--verbose", "--time-limit=250"});
  const auto s = fields_of(r, "summary");
  if (r.exit_code != 0) dump(r);
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(s.at("status"), "PASS");
  const auto client = fields_of(r, "  totals", "role=client");
  const uint64_t on_wire =
      num(client, "transport.tx_packets") + num(client, "transport.rx_packets");
  ASSERT_GT(on_wire, 100u);

  const ProgramRun check =
      run_program({"/bin/sh", SOFTRDMA_CHECK_CAPTURE, pcap, std::to_string(on_wire)});
  dump(check);
  // tshark and python3 are installed by scripts/install-deps.sh: missing is a failure.
  ASSERT_NE(check.exit_code, 2) << "tshark or python3 missing (scripts/install-deps.sh)";
  EXPECT_EQ(check.exit_code, 0);
  // Every packet the client's transport counted is in the file. The counters are
  // read when the run ends, so a last ACK or duplicate may follow them into the
  // file: a few more are allowed, none fewer.
  uint64_t in_file = 0;
  for (const std::string& line : check.lines) {
    const size_t at = line.find(" RoCEv2 packets, 0 not dissected");
    const size_t colon = line.rfind(": ", at);
    if (at != std::string::npos && colon != std::string::npos)
      in_file = std::stoull(line.substr(colon + 2, at - colon - 2));
  }
  EXPECT_GE(in_file, on_wire);
  EXPECT_LE(in_file, on_wire + 16);
  if (!HasFailure()) std::filesystem::remove(pcap);
}

}  // namespace
