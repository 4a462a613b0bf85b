#include "collie/test/support/slurm_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "collie/base/str_cat.h"
#include "collie/test/support/netns_pair.h"
#include "collie/test/support/skip.h"

namespace collie::test {

namespace {

const char* const kSbin = "/usr/sbin/";

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

SlurmCluster::SlurmCluster(const std::string& label, const std::string& subnet, int nodes,
                           Timeout ready) {
  for (const char* program : {"munged", "slurmctld", "slurmd"}) {
    if (::access((std::string(kSbin) + program).c_str(), X_OK) != 0) {
      why_ = str_cat(kSbin, program,
                     " is not installed (Debian packages munge, slurmctld, slurmd, slurm-client)");
      return;
    }
  }
  if (::access("/usr/bin/sbatch", X_OK) != 0) {
    why_ = "/usr/bin/sbatch is not installed (Debian package slurm-client)";
    return;
  }
  lan_ = std::make_unique<NetnsLan>(label, subnet, nodes + 1);
  if (!lan_->ok) {
    why_ = lan_->why;
    return;
  }
  for (int i = 1; i <= nodes; ++i) node_names_.push_back(str_cat("node", i));
  ok_ = start(ready);
}

bool SlurmCluster::start(Timeout ready) {
  const std::string d = dir_.path();
  // Every namespace resolves every node's name to its address.
  std::string hosts = "127.0.0.1 localhost\n" + lan_->addrs[0] + " ctl\n";
  for (int i = 0; i < nodes(); ++i) hosts += node_addr(i) + " " + node_names_[i] + "\n";
  for (const auto& ns : lan_->names) {
    const std::string etc = "/etc/netns/" + ns;
    std::error_code ec;
    std::filesystem::create_directories(etc, ec);
    if (ec) {
      why_ = str_cat("cannot create ", etc, ": ", ec.message());
      return false;
    }
    etc_dirs_.push_back(etc);
    std::ofstream(etc + "/hosts") << hosts;
  }

  // munge: a fresh key, readable by root only (munged refuses anything else).
  {
    std::ofstream key(dir_.file("munge.key"), std::ios::binary);
    std::ifstream random("/dev/urandom", std::ios::binary);
    char buf[1024];
    random.read(buf, sizeof buf);
    key.write(buf, sizeof buf);
  }
  std::filesystem::permissions(dir_.file("munge.key"), std::filesystem::perms::owner_read);
  const std::string socket = dir_.file("munge.sock");

  std::ofstream cf(conf());
  cf << "# written by test/support/slurm_cluster.cc\n"
     << "ClusterName=collie\n"
     << "SlurmctldHost=ctl(" << lan_->addrs[0] << ")\n"
     << "AuthType=auth/munge\nCredType=cred/munge\n"
     << "AuthInfo=socket=" << socket << "\n"
     << "SlurmUser=root\nSlurmdUser=root\n"
     << "StateSaveLocation=" << d << "/state\n"
     << "SlurmdSpoolDir=" << d << "/spool-%n\n"
     << "SlurmctldPidFile=" << d << "/slurmctld.pid\n"
     << "SlurmdPidFile=" << d << "/slurmd-%n.pid\n"
     << "SlurmctldLogFile=" << d << "/slurmctld.log\n"
     << "SlurmdLogFile=" << d << "/slurmd-%n.log\n"
     << "PlugStackConfig=" << d << "/plugstack.conf\n"
     << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
     << "JobAcctGatherType=jobacct_gather/none\n"
     << "AccountingStorageType=accounting_storage/none\n"
     << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
     << "MpiDefault=none\nReturnToService=2\n"
     // A killed step is cleaned up within seconds, not the default 30.
     << "KillWait=2\nMessageTimeout=10\n";
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 0; i < nodes(); ++i)
    cf << "NodeName=" << node_names_[i] << " NodeAddr=" << node_addr(i) << " CPUs=" << cpus
       << " State=UNKNOWN\n";
  cf << "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
  cf.close();
  std::ofstream(dir_.file("plugstack.conf")) << "";
  std::ofstream(dir_.file("cgroup.conf")) << "CgroupPlugin=cgroup/v1\n";
  std::filesystem::create_directories(d + "/state");
  for (const auto& n : node_names_) std::filesystem::create_directories(d + "/spool-" + n);

  SpawnOptions quiet;
  quiet.die_with_parent = true;
  daemons_.push_back(Subprocess::spawn(
      {std::string(kSbin) + "munged", "-F", "-f", "--socket=" + socket,
       "--key-file=" + dir_.file("munge.key"), "--pid-file=" + dir_.file("munged.pid"),
       "--log-file=" + dir_.file("munged.log"), "--seed-file=" + dir_.file("munged.seed")},
      quiet));
  // In a namespace with its own host name; slurmd also gets the empty
  // cgroup mount its plugin wants.
  auto in_namespace = [&](const std::string& ns, const std::string& host,
                          const std::string& command) {
    std::vector<std::string> argv{ip_path(),
                                  "netns",
                                  "exec",
                                  ns,
                                  "/usr/bin/unshare",
                                  "--uts",
                                  "/bin/sh",
                                  "-c",
                                  "hostname " + host + " && " + command};
    daemons_.push_back(Subprocess::spawn(argv, quiet));
  };
  in_namespace(lan_->names[0], "ctl",
               str_cat("exec ", kSbin, "slurmctld -D -f ", conf(), " -L ", d, "/slurmctld.log"));
  for (int i = 0; i < nodes(); ++i)
    in_namespace(node_namespace(i), node_names_[i],
                 str_cat("mount -t tmpfs cgroup /sys/fs/cgroup && exec ", kSbin, "slurmd -D -f ",
                         conf(), " -N ", node_names_[i]));

  // Ready when every node reports idle.
  Deadline deadline(ready);
  std::string last;
  while (true) {
    for (size_t k = 0; k < daemons_.size(); ++k) {
      if (daemons_[k].running()) continue;
      why_ = str_cat("a Slurm daemon exited at start: ", daemons_[k].command_line(), "\n",
                     daemons_[k].err(), log_tail("slurmctld.log"));
      for (const auto& n : node_names_) why_ += log_tail("slurmd-" + n + ".log");
      return false;
    }
    auto [rc, out] = run({"sinfo", "-h", "-N", "-o", "%N %T"}, std::chrono::seconds(10));
    last = out;
    int idle = 0;
    std::istringstream lines(out);
    for (std::string node, state; lines >> node >> state;) idle += state == "idle";
    if (rc == 0 && idle == nodes()) return true;
    if (deadline.expired()) {
      why_ = str_cat("the Slurm nodes were not idle after ", format_duration(deadline.limit()),
                     "; sinfo says:\n", last, log_tail("slurmctld.log"));
      for (const auto& n : node_names_) why_ += log_tail("slurmd-" + n + ".log");
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string SlurmCluster::log_tail(const std::string& file) const {
  std::string text = read_all(dir_.file(file));
  if (text.size() > 1500) text = "..." + text.substr(text.size() - 1500);
  return str_cat("\n--- ", file, " ---\n", text);
}

SlurmCluster::~SlurmCluster() {
  // Everything inside the namespaces first (daemons, slurmstepd, tasks):
  // nothing of a job may outlive the test.
  if (lan_) {
    for (const auto& ns : lan_->names)
      shell(str_cat(ip_path(), " netns pids ", ns, " 2>/dev/null | xargs -r kill -9"));
  }
  for (auto& d : daemons_) d.kill(SIGKILL);
  daemons_.clear();  // reaps them
  for (const auto& etc : etc_dirs_) {
    std::error_code ec;
    std::filesystem::remove_all(etc, ec);
  }
  lan_.reset();  // removes the namespaces
}

std::vector<std::string> SlurmCluster::client() const {
  return {ip_path(), "netns", "exec", lan_->names[0], "/usr/bin/env", "SLURM_CONF=" + conf()};
}

std::pair<int, std::string> SlurmCluster::run(const std::vector<std::string>& args,
                                              Timeout timeout) const {
  std::vector<std::string> argv = client();
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = Subprocess::spawn(argv);
  const ExitStatus st = p.wait(timeout);
  return {st.shell_code(), p.out() + p.err()};
}

std::vector<pid_t> SlurmCluster::pids_on_node(int i, const std::string& comm) const {
  std::vector<pid_t> out;
  auto [rc, pids] = shell(str_cat(ip_path(), " netns pids ", node_namespace(i)));
  std::istringstream in(pids);
  for (pid_t pid; in >> pid;) {
    std::string name = read_all(str_cat("/proc/", pid, "/comm"));
    while (!name.empty() && name.back() == '\n') name.pop_back();
    if (name == comm) out.push_back(pid);
  }
  return out;
}

std::unique_ptr<SlurmCluster> slurm_cluster_or_skip(const std::string& label,
                                                    const std::string& subnet, int nodes) {
  auto cluster = std::make_unique<SlurmCluster>(label, subnet, nodes);
  if (!cluster->ok()) {
    const std::string why = cluster->why();
    cluster.reset();
    skip_test(why);
  }
  return cluster;
}

}  // namespace collie::test
