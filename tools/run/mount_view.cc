#include "run/mount_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string_view>

namespace softrdma::tools {

namespace {

std::string failure(const std::string& what) { return what + ": " + std::strerror(errno); }

bool write_whole(const std::string& path, std::string_view text, int flags, mode_t mode) {
  const int fd = open(path.c_str(), flags | O_WRONLY | O_CLOEXEC, mode);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == ssize_t(text.size());
  const int saved = errno;
  close(fd);
  errno = saved;
  return ok;
}

// Mounts made from here on stay in this namespace; the host's later mounts still
// show (a slave, mount_namespaces(7)).
bool make_private(std::string& error) {
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) == 0) return true;
  error = failure("making the mount namespace private");
  return false;
}

// A privileged process (CAP_SYS_ADMIN) needs only a mount namespace. Anyone
// else gets a user namespace in which it is the same uid and gid (one-line maps,
// user_namespaces(7); setgroups must be denied before gid_map is written), so the
// program runs as the same user with the same file access.
bool enter_mount_namespace(std::string& error) {
  if (unshare(CLONE_NEWNS) == 0) return make_private(error);
  if (errno != EPERM) {
    error = failure("unshare(CLONE_NEWNS)");
    return false;
  }
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
    error = failure("unshare(CLONE_NEWUSER|CLONE_NEWNS)");
    return false;
  }
  const std::string uid_map = std::to_string(uid) + " " + std::to_string(uid) + " 1\n";
  const std::string gid_map = std::to_string(gid) + " " + std::to_string(gid) + " 1\n";
  if (!write_whole("/proc/self/setgroups", "deny", 0, 0) ||
      !write_whole("/proc/self/uid_map", uid_map, 0, 0) ||
      !write_whole("/proc/self/gid_map", gid_map, 0, 0)) {
    error = failure("writing the user namespace's uid/gid maps");
    return false;
  }
  return make_private(error);
}

// A tmpfs over a directory that shows every entry of the original except the
// replaced ones: symbolic links copied, everything else bind-mounted from the
// original, which stays reachable through a descriptor opened before it was
// covered (/proc/self/fd/N/name as the bind source).
class Cover {
 public:
  explicit Cover(std::string dir) : dir_(std::move(dir)) {}
  ~Cover() {
    if (original_ >= 0) close(original_);
  }
  Cover(const Cover&) = delete;
  Cover& operator=(const Cover&) = delete;

  bool mount_over(const std::vector<std::string>& replaced, std::string& error);
  // Makes the tmpfs itself read-only, as sysfs and /dev are to a user.
  bool seal(std::string& error);
  void undo() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
    mounted_ = false;
  }

  const std::string& dir() const { return dir_; }
  std::string original_entry(const std::string& name) const {
    return "/proc/self/fd/" + std::to_string(original_) + "/" + name;
  }
  int original() const { return original_; }

 private:
  bool copy_entry(const char* name, std::string& error);

  std::string dir_;
  int original_ = -1;
  bool mounted_ = false;
};

bool Cover::mount_over(const std::vector<std::string>& replaced, std::string& error) {
  original_ = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (original_ < 0) {
    error = failure("opening " + dir_);
    return false;
  }
  if (mount("softrdma", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
    error = failure("mounting a tmpfs over " + dir_);
    return false;
  }
  mounted_ = true;
  DIR* listing = fdopendir(dup(original_));
  if (listing == nullptr) {
    error = failure("listing " + dir_);
    return false;
  }
  std::unique_ptr<DIR, int (*)(DIR*)> closer(listing, closedir);
  while (dirent* e = readdir(listing)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    bool skip = false;
    for (const std::string& r : replaced) skip = skip || r == name;
    if (!skip && !copy_entry(e->d_name, error)) return false;
  }
  return true;
}

bool Cover::copy_entry(const char* name, std::string& error) {
  struct stat st;
  const std::string target = dir_ + "/" + name;
  if (fstatat(original_, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    error = failure("stat " + target);
    return false;
  }
  if (S_ISLNK(st.st_mode)) {
    char link[PATH_MAX];
    const ssize_t n = readlinkat(original_, name, link, sizeof link - 1);
    if (n < 0 || symlink(std::string(link, size_t(n)).c_str(), target.c_str()) != 0) {
      error = failure("copying the link " + target);
      return false;
    }
    return true;
  }
  const bool made = S_ISDIR(st.st_mode) ? mkdir(target.c_str(), 0755) == 0
                                        : write_whole(target, "", O_CREAT | O_EXCL, 0600);
  if (!made ||
      mount(original_entry(name).c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    error = failure("binding " + target);
    return false;
  }
  return true;
}

bool Cover::seal(std::string& error) {
  if (mount(nullptr, dir_.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
            nullptr) == 0)
    return true;
  error = failure("making the view of " + dir_ + " read-only");
  return false;
}

// mkdir -p of the directories above `relative` inside `root`.
bool make_parents(const std::string& root, const std::string& relative) {
  for (size_t slash = relative.find('/'); slash != std::string::npos;
       slash = relative.find('/', slash + 1)) {
    const std::string dir = root + "/" + relative.substr(0, slash);
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

bool add_files(const Cover& cover, const std::vector<ViewFile>& files, std::string& error) {
  for (const ViewFile& f : files) {
    const std::string path = cover.dir() + "/" + f.path;
    if (!make_parents(cover.dir(), f.path) ||
        !write_whole(path, f.contents, O_CREAT | O_EXCL, 0444)) {
      error = failure("writing " + path);
      return false;
    }
  }
  return true;
}

// /dev/infiniband/<uverbs>: the original /dev/null bound over an empty file. A
// character device that answers reads with end-of-file and discards writes:
// softrdma's library never opens it (there is no kernel object behind the device).
bool add_uverbs(const Cover& dev, const std::string& uverbs_name, std::string& error) {
  struct stat st;
  if (fstatat(dev.original(), "null", &st, 0) != 0 || !S_ISCHR(st.st_mode)) {
    error = "/dev/null is not a character device";
    return false;
  }
  const std::string path = dev.dir() + "/infiniband/" + uverbs_name;
  if (!make_parents(dev.dir(), "infiniband/" + uverbs_name) ||
      !write_whole(path, "", O_CREAT | O_EXCL, 0600) ||
      mount(dev.original_entry("null").c_str(), path.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    error = failure("binding /dev/null to " + path);
    return false;
  }
  return true;
}

bool build(Cover& sys, Cover& dev, const std::vector<ViewFile>& class_files,
           const std::string& uverbs_name, std::string& error) {
  return sys.mount_over(kReplacedClasses, error) && add_files(sys, class_files, error) &&
         sys.seal(error) && dev.mount_over({"infiniband"}, error) &&
         add_uverbs(dev, uverbs_name, error) && dev.seal(error);
}

}  // namespace

bool enter_view(const std::vector<ViewFile>& class_files, const std::string& uverbs_name,
                std::string& error) {
  char cwd[PATH_MAX];
  const bool have_cwd = getcwd(cwd, sizeof cwd) != nullptr;
  if (!enter_mount_namespace(error)) return false;
  Cover sys("/sys/class");
  Cover dev("/dev");
  if (!build(sys, dev, class_files, uverbs_name, error)) {
    dev.undo();
    sys.undo();
    return false;
  }
  // A working directory under /dev or /sys/class would still be the covered one;
  // if it cannot be entered again, the program starts in the original.
  if (have_cwd) {
    [[maybe_unused]] const int ignored = chdir(cwd);
  }
  return true;
}

}  // namespace softrdma::tools
