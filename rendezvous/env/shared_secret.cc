#include "collie/rendezvous/env/shared_secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "collie/base/error.h"
#include "collie/base/sha256.h"
#include "collie/base/str_cat.h"

namespace collie {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r'))
    text.pop_back();
  return text;
}

// Writes a fresh secret to a temporary file next to `path` and links it
// into place; losing the race to another process is fine.
void create_secret_file(const std::string& path) {
  Nonce tag;
  random_bytes(tag);
  const std::string tmp = str_cat(path, ".tmp.", to_hex(std::span(tag).first(8)));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw InvalidArgument(
        str_cat(kJobSecretFileEnv, " ", path, ": cannot create ", tmp, ": ", std::strerror(errno)));
  const std::string hex = JobSecret::generate().to_hex() + "\n";
  const bool written =
      ::write(fd, hex.data(), hex.size()) == static_cast<ssize_t>(hex.size()) && ::fsync(fd) == 0;
  ::close(fd);
  const int linked = written ? ::link(tmp.c_str(), path.c_str()) : -1;
  const int err = errno;
  ::unlink(tmp.c_str());
  if (!written || (linked != 0 && err != EEXIST))
    throw InvalidArgument(str_cat(kJobSecretFileEnv, " ", path,
                                  ": cannot write it: ", std::strerror(written ? err : EIO)));
}

}  // namespace

JobSecret secret_from_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT)
      throw InvalidArgument(str_cat(kJobSecretFileEnv, " ", path, ": ", std::strerror(errno)));
    create_secret_file(path);
    if (::stat(path.c_str(), &st) != 0)
      throw InvalidArgument(str_cat(kJobSecretFileEnv, " ", path, ": ", std::strerror(errno)));
  }
  if ((st.st_mode & 077) != 0)
    throw InvalidArgument(
        str_cat(kJobSecretFileEnv, " ", path, " can be read by other users (mode ",
                str_cat(std::oct, st.st_mode & 0777u), "): chmod 600 it, or it is no secret"));
  const std::string where = str_cat(kJobSecretFileEnv, " ", path);
  return JobSecret::from_hex(read_all(path), where.c_str());
}

JobSecret derive_job_secret(const std::string& kind, const std::vector<std::string>& parts) {
  std::string input = "collie derived job secret v1";
  auto add = [&input](const std::string& s) { input += str_cat("\n", s.size(), ":", s); };
  add(kind);
  for (const auto& p : parts) add(p);
  const Sha256Digest digest = Sha256().update(input).finish();
  return JobSecret::from_hex(to_hex(digest), "a derived job secret");
}

std::optional<SharedSecret> scheduler_secret(const EnvLookup& env) {
  if (auto path = env(kJobSecretFileEnv); path && !path->empty())
    return SharedSecret{secret_from_file(*path), str_cat(kJobSecretFileEnv, " ", *path)};
  auto job = env("SLURM_JOB_ID");
  auto tasks = env("SLURM_NTASKS");
  if (job && tasks && *tasks != "1" && env("SLURM_PROCID")) {
    const std::string nodes = env("SLURM_JOB_NODELIST").value_or("");
    const std::string uid = env("SLURM_JOB_UID").value_or("");
    return SharedSecret{derive_job_secret("slurm", {*job, nodes, uid}),
                        str_cat("derived from SLURM job ", *job)};
  }
  return std::nullopt;
}

}  // namespace collie
