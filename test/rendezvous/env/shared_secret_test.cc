// Where a multi-node job's secret comes from without COLLIE_JOB_SECRET: a
// secret file (made once, atomically, by whoever comes first; refused when
// others can read it), a secret derived from what every process shares, and
// the choice for programs that srun starts directly.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "collie/base/error.h"
#include "collie/rendezvous/env/shared_secret.h"
#include "collie/test/support/env_table.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

TEST_CASE("derived job secrets: the same inputs give the same secret, any change another",
          "[security][shared_secret]") {
  const auto a = derive_job_secret("static", {"10.0.0.1", "job7"}).to_hex();
  CHECK(a == derive_job_secret("static", {"10.0.0.1", "job7"}).to_hex());
  CHECK(a.size() == 64);
  CHECK(a != derive_job_secret("static", {"10.0.0.1", "job8"}).to_hex());
  CHECK(a != derive_job_secret("c10d", {"10.0.0.1", "job7"}).to_hex());
  // Length prefixes: moving a character between parts changes the secret.
  CHECK(derive_job_secret("k", {"ab", "c"}).to_hex() !=
        derive_job_secret("k", {"a", "bc"}).to_hex());
}

TEST_CASE("a secret file is made once, atomically, and must be private",
          "[security][shared_secret]") {
  TempDir dir;
  const std::string path = dir.file("job.secret");
  // Eight processes' worth of first comers race to make it: one wins, all
  // read the same secret, and no temporary file is left.
  std::vector<std::string> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] { got[i] = secret_from_file(path).to_hex(); });
  for (auto& t : threads) t.join();
  for (const auto& s : got) CHECK(s == got.front());
  size_t files = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  CHECK(files == 1);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(secret_from_file(path).to_hex() == got.front());

  ::chmod(path.c_str(), 0644);
  CHECK_THROWS_WITH(secret_from_file(path), Contains("COLLIE_JOB_SECRET_FILE " + path) &&
                                                Contains("can be read by other users (mode 644)"));
  const std::string bad = dir.file("bad.secret");
  { std::ofstream(bad) << "not hex\n"; }
  ::chmod(bad.c_str(), 0600);
  CHECK_THROWS_WITH(secret_from_file(bad), Contains("COLLIE_JOB_SECRET_FILE " + bad));
  CHECK_THROWS_WITH(secret_from_file(dir.file("no/such/dir/x")), Contains("cannot create"));
}

TEST_CASE("programs started by srun derive the job's secret; the file wins",
          "[security][shared_secret]") {
  std::map<std::string, std::string> env{{"SLURM_JOB_ID", "91"},
                                         {"SLURM_NTASKS", "4"},
                                         {"SLURM_PROCID", "2"},
                                         {"SLURM_JOB_NODELIST", "n[1-2]"},
                                         {"SLURM_JOB_UID", "1000"}};
  auto s = scheduler_secret(env_table(env));
  REQUIRE(s);
  CHECK(s->source == "derived from SLURM job 91");
  CHECK(s->secret.to_hex() == derive_job_secret("slurm", {"91", "n[1-2]", "1000"}).to_hex());
  env["SLURM_PROCID"] = "0";
  CHECK(scheduler_secret(env_table(env))->secret.to_hex() == s->secret.to_hex());
  // One task: nothing to share with.
  env["SLURM_NTASKS"] = "1";
  CHECK_FALSE(scheduler_secret(env_table(env)));
  CHECK_FALSE(scheduler_secret(env_table({})));
  TempDir dir;
  env["COLLIE_JOB_SECRET_FILE"] = dir.file("s");
  auto f = scheduler_secret(env_table(env));
  REQUIRE(f);
  CHECK(f->source == "COLLIE_JOB_SECRET_FILE " + dir.file("s"));
}
