// A real Slurm cluster on one machine, for tests of jobs that a scheduler
// starts: one munged, one slurmctld and N slurmd "nodes", each daemon in its
// own network namespace (a NetnsLan: the controller "ctl" at <subnet>.1,
// node<i> at <subnet>.<i+1>) with its own host name (a UTS namespace) and an
// /etc/hosts that names every node (/etc/netns/<namespace>/hosts, which
// `ip netns exec` mounts over /etc/hosts). Each node declares the machine's
// CPU count, so a 2-core machine runs 2 tasks per node.
//
// The daemons are Debian's Slurm 22.05 (slurmctld, slurmd, slurm-client)
// and munge. Their configuration, state, spool and logs live in a TempDir;
// the Slurm ports are the defaults (6817, 6818), which is safe because
// nothing else is inside these namespaces. The cgroup plugin is cgroup/v1
// over an empty tmpfs (processes are tracked by proctrack/linuxproc, tasks
// are not confined), because `ip netns exec` remounts /sys and takes the
// machine's cgroup mounts away.
//
// Destruction kills every process inside the namespaces (daemons,
// slurmstepd, tasks), then removes the namespaces, the /etc/netns entries
// and the directory: nothing is left behind, also when the test fails.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/test/support/netns_lan.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

namespace collie::test {

class SlurmCluster {
 public:
  // Starts the cluster and waits (under `ready`) until every node is idle.
  // Where it cannot (not root, no namespaces, a Slurm package missing, a
  // daemon that will not start), ok() is false and why() says what was
  // refused, with the daemon's log.
  SlurmCluster(const std::string& label, const std::string& subnet, int nodes,
               Timeout ready = std::chrono::seconds(60));
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }

  // The prefix of a Slurm client command (sbatch, srun, scancel, ...) run
  // from the controller's namespace: {ip, netns, exec, <ctl>, env,
  // SLURM_CONF=<conf>}.
  std::vector<std::string> client() const;
  // Runs a client command to its end under `timeout`; exit status and
  // stdout + stderr.
  std::pair<int, std::string> run(const std::vector<std::string>& args,
                                  Timeout timeout = std::chrono::seconds(30)) const;

  int nodes() const { return static_cast<int>(node_names_.size()); }
  const std::string& node_name(int i) const { return node_names_[i]; }  // node1, ...
  const std::string& node_namespace(int i) const { return lan_->names[i + 1]; }
  const std::string& node_addr(int i) const { return lan_->addrs[i + 1]; }
  const std::string& dir() const { return dir_.path(); }
  std::string conf() const { return dir_.file("slurm.conf"); }
  // Pids of the processes inside node i's namespace whose command name
  // (/proc/<pid>/comm) is `comm`.
  std::vector<pid_t> pids_on_node(int i, const std::string& comm) const;

 private:
  bool start(Timeout ready);
  std::string log_tail(const std::string& file) const;

  TempDir dir_;
  std::unique_ptr<NetnsLan> lan_;
  std::vector<std::string> node_names_;
  std::vector<std::string> etc_dirs_;  // /etc/netns/<namespace>, made here
  std::vector<Subprocess> daemons_;
  bool ok_ = false;
  std::string why_;
};

// A SlurmCluster, or the test skips naming what was refused (a failure
// under CI=true). Call it before the test starts processes.
std::unique_ptr<SlurmCluster> slurm_cluster_or_skip(const std::string& label,
                                                    const std::string& subnet, int nodes);

}  // namespace collie::test
