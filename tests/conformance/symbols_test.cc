// Symbol-level ABI conformance (abi/README.md 1, 2 and 12): what real clients
// import (src/verbs/abi-imports/*.txt) is what softrdma's libraries export, at
// the same version nodes, and the stub vendor libraries load under real clients.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kSourceDir = SOFTRDMA_SOURCE_DIR;
const fs::path kLibDir = SOFTRDMA_BUILD_LIB_DIR;
const fs::path kImportsDir = kSourceDir / "src/verbs/abi-imports";

using Versioned = std::pair<std::string, std::string>;  // (node, symbol)

struct RunResult {
  int status = -1;  // exit code, or -1 when the command did not exit normally
  std::string output;
};

// Runs a shell command and returns its exit code and stdout (and stderr, if
// the command redirects it).
RunResult run(const std::string& command) {
  RunResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) result.output.append(buf, n);
  int status = pclose(pipe);
  if (WIFEXITED(status)) result.status = WEXITSTATUS(status);
  return result;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every "(NODE) symbol" line of every import list whose node starts with
// node_prefix ("MLX5_", "EFA_", "IBVERBS_"): the measured clients
// (abi-imports/) and what is exported beyond them (abi-extra/), as
// scripts/gen-version-script.py reads them.
std::set<Versioned> imports_for(const std::string& node_prefix) {
  std::set<Versioned> found;
  const std::regex line_re(R"(^\((\S+)\)\s+(\S+)\s*$)");
  std::vector<fs::directory_entry> lists;
  for (const fs::path& dir : {kImportsDir, kImportsDir.parent_path() / "abi-extra",
                              kSourceDir / "src/rdmacm/abi-extra"})
    for (const auto& entry : fs::directory_iterator(dir)) lists.push_back(entry);
  for (const auto& entry : lists) {
    if (entry.path().extension() != ".txt") continue;
    std::ifstream in(entry.path());
    std::string line;
    std::smatch m;
    while (std::getline(in, line)) {
      if (std::regex_match(line, m, line_re) && m[1].str().rfind(node_prefix, 0) == 0) {
        found.emplace(m[1], m[2]);
      }
    }
  }
  return found;
}

// Defined dynamic symbols of a library with their version node, as
// `readelf --dyn-syms -W` prints them ("name@@NODE" or "name@NODE").
std::set<Versioned> exported_symbols(const fs::path& lib) {
  std::set<Versioned> found;
  RunResult r = run(std::string(SOFTRDMA_READELF) + " --dyn-syms -W '" + lib.string() + "'");
  EXPECT_EQ(r.status, 0) << "readelf failed on " << lib;
  // Num: Value Size Type Bind Vis Ndx Name
  const std::regex row_re(R"(^\s*\d+:\s+\S+\s+\S+\s+(\S+)\s+(\S+)\s+\S+\s+(\S+)\s+([^@\s]+)@@?(\S+)\s*$)");
  std::istringstream lines(r.output);
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (!std::regex_match(line, m, row_re)) continue;
    if (m[3] == "UND" || m[2] == "LOCAL") continue;  // imported, or not exported
    if (m[1] == "OBJECT" && m[4] == m[5]) continue;   // the node's own marker symbol
    found.emplace(m[5], m[4]);
  }
  return found;
}

// Version definitions of a library: node -> parent node ("" for none), from
// `readelf -V -W`.
std::map<std::string, std::string> version_nodes(const fs::path& lib) {
  std::map<std::string, std::string> nodes;
  RunResult r = run(std::string(SOFTRDMA_READELF) + " -V -W '" + lib.string() + "'");
  EXPECT_EQ(r.status, 0) << "readelf failed on " << lib;
  const std::regex def_re(R"(Flags: (\S+)\s+Index: \d+\s+Cnt: \d+\s+Name: (\S+))");
  const std::regex parent_re(R"(Parent 1: (\S+))");
  std::istringstream lines(r.output);
  std::string line, last;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (line.find("Version needs") != std::string::npos) break;
    if (std::regex_search(line, m, def_re)) {
      last = m[1] == "BASE" ? "" : m[2].str();  // BASE names the soname itself
      if (!last.empty()) nodes[last] = "";
    } else if (!last.empty() && std::regex_search(line, m, parent_re)) {
      nodes[last] = m[1];
    }
  }
  return nodes;
}

// The system's copy of a library (the real rdma-core one), or "" if absent.
fs::path system_library(const std::string& soname) {
  RunResult r = run("/sbin/ldconfig -p 2>/dev/null");
  std::smatch m;
  // "\tlibmlx5.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libmlx5.so.1"
  const std::regex row_re("\\s" + std::regex_replace(soname, std::regex(R"(\.)"), R"(\.)") +
                          R"( \([^)]*\) => (\S+))");
  return std::regex_search(r.output, m, row_re) ? fs::path(m[1].str()) : fs::path();
}

// A version script as written by scripts/gen-version-script.py: the nodes with
// their parent and symbols.
struct MapNode {
  std::string parent;
  std::set<std::string> symbols;
};
std::map<std::string, MapNode> parse_version_script(const fs::path& path) {
  std::string text = std::regex_replace(read_text(path), std::regex(R"(/\*[\s\S]*?\*/)"), " ");
  std::map<std::string, MapNode> nodes;
  const std::regex node_re(R"(([A-Za-z0-9_.]+)\s*\{([^}]*)\}\s*([A-Za-z0-9_.]*)\s*;)");
  const std::regex symbol_re(R"(([A-Za-z_][A-Za-z0-9_]*)\s*;)");
  for (std::sregex_iterator it(text.begin(), text.end(), node_re), end; it != end; ++it) {
    MapNode& node = nodes[(*it)[1]];
    node.parent = (*it)[3];
    std::string body = (*it)[2];
    for (std::sregex_iterator s(body.begin(), body.end(), symbol_re); s != end; ++s) {
      node.symbols.insert((*s)[1]);
    }
  }
  return nodes;
}

// --- Stub vendor libraries -------------------------------------------------

struct VendorLib {
  const char* soname;
  const char* node_prefix;
};
const VendorLib kVendorLibs[] = {{"libmlx5.so.1", "MLX5_"}, {"libefa.so.1", "EFA_"}};
// Names the parameter in test names (ctest shows them).
void PrintTo(const VendorLib& lib, std::ostream* os) { *os << lib.soname; }

class VendorStubTest : public testing::TestWithParam<VendorLib> {};

// Every vendor symbol a client imports is exported, defined, at its node.
TEST_P(VendorStubTest, ExportsEveryImportedSymbolAtItsNode) {
  const fs::path lib = kLibDir / GetParam().soname;
  ASSERT_TRUE(fs::exists(lib)) << lib << " not built";
  const std::set<Versioned> imported = imports_for(GetParam().node_prefix);
  ASSERT_FALSE(imported.empty());
  const std::set<Versioned> exported = exported_symbols(lib);
  for (const auto& [node, symbol] : imported) {
    EXPECT_TRUE(exported.count({node, symbol})) << symbol << "@" << node << " missing";
  }
  // And nothing else: the stub exports the measured ABI, no more.
  for (const auto& [node, symbol] : exported) {
    EXPECT_TRUE(imported.count({node, symbol})) << symbol << "@" << node << " exported but imported by no client";
  }
}

// The stub defines the same version nodes, chained the same way, as the real
// rdma-core library, so version needs of any client of it are satisfiable.
TEST_P(VendorStubTest, VersionNodesMatchTheRealLibrary) {
  const fs::path real = system_library(GetParam().soname);
  if (real.empty()) GTEST_SKIP() << "no system " << GetParam().soname << " to compare with";
  const auto expected = version_nodes(real);
  ASSERT_GT(expected.size(), 1u) << "could not read the version nodes of " << real;
  EXPECT_EQ(version_nodes(kLibDir / GetParam().soname), expected);
}

// The stub's soname is the real one, so it stands in for it.
TEST_P(VendorStubTest, HasTheRealSoname) {
  RunResult r = run(std::string(SOFTRDMA_READELF) + " -d '" + (kLibDir / GetParam().soname).string() + "'");
  EXPECT_NE(r.output.find(std::string("Library soname: [") + GetParam().soname + "]"), std::string::npos)
      << r.output;
}

INSTANTIATE_TEST_SUITE_P(Stubs, VendorStubTest, testing::ValuesIn(kVendorLibs),
                         [](const auto& info) {
                           std::string name = info.param.node_prefix;
                           return name.substr(0, name.size() - 1);
                         });

// Every stub, looked up at its version node, answers "not supported".
TEST(VendorStubBehaviour, EveryStubAnswersNotSupported) {
  struct Stub {
    const char* kind;
    const char* name;
    const char* node;
    const char* soname;
  };
  const std::vector<Stub> stubs = {
#define SOFTRDMA_STUB(kind, name, node) {#kind, #name, #node, "libmlx5.so.1"},
#include "verbs/vendor_stubs/mlx5_stubs.def"
#undef SOFTRDMA_STUB
#define SOFTRDMA_STUB(kind, name, node) {#kind, #name, #node, "libefa.so.1"},
#include "verbs/vendor_stubs/efa_stubs.def"
#undef SOFTRDMA_STUB
  };
  std::map<std::string, void*> handles;
  for (const VendorLib& lib : kVendorLibs) {
    void* handle = dlopen((kLibDir / lib.soname).c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle, nullptr) << dlerror();
    handles[lib.soname] = handle;
  }
  for (const Stub& stub : stubs) {
    SCOPED_TRACE(std::string(stub.name) + "@" + stub.node);
    void* sym = dlvsym(handles[stub.soname], stub.name, stub.node);
    ASSERT_NE(sym, nullptr) << dlerror();
    // Called without arguments: the stubs ignore theirs (vendor_stub.c).
    const std::string kind = stub.kind;
    errno = 0;
    if (kind == "PTR") {
      EXPECT_EQ(reinterpret_cast<void* (*)()>(sym)(), nullptr);
      EXPECT_EQ(errno, EOPNOTSUPP);
    } else if (kind == "INT") {
      EXPECT_EQ(reinterpret_cast<int (*)()>(sym)(), EOPNOTSUPP);
    } else if (kind == "FD") {
      EXPECT_EQ(reinterpret_cast<int (*)()>(sym)(), -1);
      EXPECT_EQ(errno, EOPNOTSUPP);
    } else if (kind == "SSIZE") {
      EXPECT_EQ(reinterpret_cast<ssize_t (*)()>(sym)(), -1);
      EXPECT_EQ(errno, EOPNOTSUPP);
    } else if (kind == "BOOL") {
      EXPECT_FALSE(reinterpret_cast<bool (*)()>(sym)());
    } else {
      ASSERT_EQ(kind, "VOID");
      reinterpret_cast<void (*)()>(sym)();
    }
  }
  for (auto& [soname, handle] : handles) dlclose(handle);
}

// --- libibverbs version script ---------------------------------------------

// Every symbol a client imports (with node_prefix) is listed in the map at its
// node, and no symbol sits at two nodes.
void expect_map_lists_imports(const fs::path& map, const std::string& node_prefix) {
  const auto nodes = parse_version_script(map);
  ASSERT_FALSE(nodes.empty());
  const std::set<Versioned> imported = imports_for(node_prefix);
  ASSERT_FALSE(imported.empty());
  for (const auto& [node, symbol] : imported) {
    auto it = nodes.find(node);
    ASSERT_NE(it, nodes.end()) << "node " << node << " missing from " << map;
    EXPECT_TRUE(it->second.symbols.count(symbol)) << symbol << " not listed at " << node;
  }
  std::map<std::string, std::string> node_of;
  for (const auto& [node, contents] : nodes) {
    for (const std::string& symbol : contents.symbols) {
      if (symbol == "local") continue;
      auto [it, inserted] = node_of.emplace(symbol, node);
      EXPECT_TRUE(inserted) << symbol << " at " << it->second << " and " << node;
    }
  }
}

// The map's nodes and their inheritance are those of rdma-core 44's library,
// beside softrdma's own private node (SOFTRDMA_PRIVATE_1: what softrdma's
// librdmacm calls in its libibverbs).
void expect_nodes_of_real_library(const fs::path& map, const std::string& soname) {
  const fs::path real = system_library(soname);
  if (real.empty()) GTEST_SKIP() << "no system " << soname << " to compare with";
  std::map<std::string, std::string> from_map;
  for (const auto& [node, contents] : parse_version_script(map)) from_map[node] = contents.parent;
  from_map.erase("SOFTRDMA_PRIVATE_1");
  const auto expected = version_nodes(real);
  ASSERT_GT(expected.size(), 1u) << "could not read the version nodes of " << real;
  EXPECT_EQ(from_map, expected);
}

// The built library exports exactly what its map lists, each symbol defined at
// its node. Skips until the library is built into lib/.
void expect_exports_exactly_the_map(const fs::path& map, const std::string& soname) {
  const fs::path lib = kLibDir / soname;
  if (!fs::exists(lib)) GTEST_SKIP() << lib << " not built yet";
  std::set<Versioned> listed;
  for (const auto& [node, contents] : parse_version_script(map)) {
    for (const std::string& symbol : contents.symbols) {
      if (symbol != "local") listed.emplace(node, symbol);
    }
  }
  ASSERT_FALSE(listed.empty());
  const std::set<Versioned> exported = exported_symbols(lib);
  for (const auto& [node, symbol] : listed) {
    EXPECT_TRUE(exported.count({node, symbol})) << symbol << "@" << node << " not exported";
  }
  for (const auto& [node, symbol] : exported) {
    EXPECT_TRUE(listed.count({node, symbol})) << symbol << "@" << node << " exported but not in the map";
  }
}

const fs::path kVerbsMap = kSourceDir / "src/verbs/libibverbs.map";
const fs::path kRdmacmMap = kSourceDir / "src/rdmacm/librdmacm.map";

TEST(VerbsVersionScript, ListsEveryImportedSymbolAtItsNode) {
  expect_map_lists_imports(kVerbsMap, "IBVERBS_");
}
TEST(VerbsVersionScript, NodesMatchTheRealLibrary) {
  expect_nodes_of_real_library(kVerbsMap, "libibverbs.so.1");
}
TEST(VerbsLibrary, ExportsExactlyTheVersionScript) {
  expect_exports_exactly_the_map(kVerbsMap, "libibverbs.so.1");
}
// librdmacm: what rping, ucmatose, udaddy, rdma_server/rdma_client, perftest and
// pyverbs import, and everything Debian's librdmacm.so.1 exports.
TEST(RdmacmVersionScript, ListsEveryImportedSymbolAtItsNode) {
  expect_map_lists_imports(kRdmacmMap, "RDMACM_");
}
TEST(RdmacmVersionScript, NodesMatchTheRealLibrary) {
  expect_nodes_of_real_library(kRdmacmMap, "librdmacm.so.1");
}
TEST(RdmacmLibrary, ExportsExactlyTheVersionScript) {
  expect_exports_exactly_the_map(kRdmacmMap, "librdmacm.so.1");
}

// The import lists the version scripts are generated from are still the
// measurement (tests/data/abi-imports/, objdump -T of Debian 12's clients, kept
// as measured): what softrdma must export beyond it goes to abi-extra/, never
// into the measured lists.
TEST(AbiImports, CopyMatchesSharedMeasurements) {
  const fs::path measured = kSourceDir / "tests/data/abi-imports";
  std::set<std::string> ours, theirs;
  for (const auto& e : fs::directory_iterator(kImportsDir)) {
    if (e.path().extension() == ".txt") ours.insert(e.path().filename());
  }
  for (const auto& e : fs::directory_iterator(measured)) {
    if (e.path().extension() == ".txt") theirs.insert(e.path().filename());
  }
  ASSERT_FALSE(theirs.empty()) << measured;
  EXPECT_EQ(ours, theirs);
  for (const std::string& name : theirs) {
    EXPECT_EQ(read_text(kImportsDir / name), read_text(measured / name)) << name << " differs";
  }
}

// --- Loading under real clients --------------------------------------------

fs::path find_program(const std::string& name) {
  RunResult r = run("command -v " + name);
  while (!r.output.empty() && r.output.back() == '\n') r.output.pop_back();
  return r.status == 0 ? fs::path(r.output) : fs::path();
}

// Clients run with a directory holding only the two stubs first on
// LD_LIBRARY_PATH, not the whole build lib/: once softrdma's own
// libibverbs.so.1 is built there, it is sanitized in the ASan build and could
// not load into these unsanitized binaries. These tests are about the stubs,
// beside the system's libibverbs.
class StubsLoad : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    stubs_dir_ = fs::temp_directory_path() / ("softrdma-stubs-" + std::to_string(getpid()));
    fs::create_directories(stubs_dir_);
    for (const VendorLib& lib : kVendorLibs) {
      fs::create_symlink(kLibDir / lib.soname, stubs_dir_ / lib.soname);
    }
  }
  static void TearDownTestSuite() { fs::remove_all(stubs_dir_); }

  static std::string with_stubs(const std::string& command) {
    return "LD_LIBRARY_PATH='" + stubs_dir_.string() + "' " + command + " 2>&1";
  }

  static fs::path stubs_dir_;
};
fs::path StubsLoad::stubs_dir_;

// perftest's libmlx5.so.1 and libefa.so.1 resolve into the build tree's lib/,
// with every version node it needs. (ldd only maps the libraries, so the
// whole lib/ can go first even in the sanitizer build.)
TEST_F(StubsLoad, PerftestResolvesVendorLibsFromBuildTree) {
  const fs::path perftest = find_program("ib_write_bw");
  if (perftest.empty()) GTEST_SKIP() << "perftest not installed";
  RunResult r = run("LD_LIBRARY_PATH='" + kLibDir.string() + "' ldd '" + perftest.string() + "' 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const VendorLib& lib : kVendorLibs) {
    EXPECT_NE(r.output.find(std::string(lib.soname) + " => " + (kLibDir / lib.soname).string()),
              std::string::npos)
        << r.output;
  }
  EXPECT_EQ(r.output.find("not found"), std::string::npos) << r.output;
}

// Every perftest client starts (BIND_NOW: all imports resolve at load) with the
// stubs in front, as far as printing its usage.
TEST_F(StubsLoad, EveryPerftestClientStarts) {
  int started = 0;
  for (const auto& entry : fs::directory_iterator(kImportsDir)) {
    const std::string client = entry.path().stem();
    if (client.rfind("ib_", 0) != 0) continue;
    const fs::path program = find_program(client);
    if (program.empty()) continue;
    SCOPED_TRACE(client);
    RunResult r = run(with_stubs("'" + program.string() + "' --help"));
    EXPECT_NE(r.status, 127) << r.output;  // the loader's exit code
    EXPECT_EQ(r.output.find("symbol lookup error"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("not found"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("Usage:"), std::string::npos) << r.output;
    ++started;
  }
  if (started == 0) GTEST_SKIP() << "perftest not installed";
}

// pyverbs' vendor modules (loaded by rdma-core's test suite) import with the
// stubs in front, and bind to them. They live in Debian's /usr/bin/python3.
TEST_F(StubsLoad, PyverbsVendorModulesImport) {
  const fs::path providers = "/usr/lib/python3/dist-packages/pyverbs/providers";
  if (!fs::exists(providers)) GTEST_SKIP() << "python3-pyverbs not installed";
  std::string script = "import importlib\n";
  int modules = 0;
  for (const char* vendor : {"mlx5", "efa"}) {
    for (const auto& entry : fs::directory_iterator(providers / vendor)) {
      if (entry.path().extension() != ".so") continue;
      const std::string file = entry.path().filename();
      script += std::string("importlib.import_module('pyverbs.providers.") + vendor + "." +
                file.substr(0, file.find('.')) + "')\n";
      ++modules;
    }
  }
  ASSERT_GT(modules, 0);
  script += "print(open('/proc/self/maps').read())\n";
  RunResult r = run(with_stubs("/usr/bin/python3 -c \"" + script + "\""));
  ASSERT_EQ(r.status, 0) << r.output;
  for (const VendorLib& lib : kVendorLibs) {
    // /proc/self/maps shows the file the symlink resolves to.
    EXPECT_NE(r.output.find(fs::canonical(kLibDir / lib.soname).string()), std::string::npos)
        << lib.soname;
  }
}

}  // namespace
