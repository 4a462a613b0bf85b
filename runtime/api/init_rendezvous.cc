#include "collie/runtime/api/init_rendezvous.h"

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/init_method.h"
#include "collie/rendezvous/prefix_store.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/runtime/api/distributed.h"

namespace collie {
namespace {

void check_rank_and_size(int rank, int world_size, const std::string& source) {
  COLLIE_ARG_CHECK(world_size >= 1, "init_process_group (", source, "): world_size ", world_size,
                   " must be at least 1");
  COLLIE_ARG_CHECK(rank >= 0 && rank < world_size, "init_process_group (", source, "): rank ", rank,
                   " is out of range for world_size ", world_size);
}

// Fills what the URL left out from the options, then the launcher's
// environment (SLURM, Open MPI), like torch's rank=/world_size= arguments.
void complete(InitMethod& m, const InitOptions& options, const LaunchEnv& launch) {
  if (options.rank >= 0) {
    m.rank = options.rank;
    m.rank_given = true;
  } else if (!m.rank_given && launch.distributed) {
    m.rank = launch.rank;
    m.rank_given = true;
  }
  if (options.world_size >= 0) {
    m.world_size = options.world_size;
    m.world_size_given = true;
  } else if (!m.world_size_given && launch.distributed) {
    m.world_size = launch.world_size;
    m.world_size_given = true;
  }
  m.validate_complete();
}

}  // namespace

std::string agent_store_prefix(int restart_count) {
  return str_cat("/worker/attempt_", restart_count);
}

Rendezvous open_rendezvous(const InitOptions& options, Timeout timeout, const EnvLookup& env) {
  if (options.store) {
    Rendezvous r{options.store, options.rank, options.world_size, "caller's store"};
    if (r.rank < 0 || r.world_size < 0)
      throw InvalidArgument(
          str_cat("init_process_group: with a store given, rank and world_size "
                  "must be given too (got rank ",
                  r.rank, ", world_size ", r.world_size, ")"));
    check_rank_and_size(r.rank, r.world_size, r.source);
    r.store->set_timeout(timeout);
    return r;
  }
  LaunchEnv launch = detect_launch_env(env);
  // env:// reads MASTER_ADDR and MASTER_PORT; where the job script exported
  // neither, srun's task still knows them (the first node of the job, the
  // job-id port: detect_launch_env), as they would be under collie-run.
  const EnvLookup with_launch = [&](const std::string& name) -> std::optional<std::string> {
    if (auto v = env(name)) return v;
    if (name == "MASTER_ADDR" && !launch.master_addr.empty()) return launch.master_addr;
    if (name == "MASTER_PORT" && launch.master_port) return std::to_string(*launch.master_port);
    return std::nullopt;
  };
  InitMethod m =
      parse_init_method(options.init_method.empty() ? "env://" : options.init_method, with_launch);
  complete(m, options, launch);
  Rendezvous r;
  r.rank = m.rank;
  r.world_size = m.world_size;
  // torch's _create_c10d_store: under torchelastic (collie-run, torchrun)
  // the launcher already hosts the store at the URL's address, so every rank,
  // rank 0 included, is a client, under the attempt's prefix so that a
  // restarted job never reads the previous attempt's keys. A file:// URL is
  // used as given.
  if (launch.use_agent_store && m.scheme != InitScheme::kFile) {
    if (m.port == 0)
      throw InvalidArgument(str_cat("init_process_group: TORCHELASTIC_USE_AGENT_STORE=True but ",
                                    m.url, " names no port for the launcher's store"));
    r.source = str_cat("agent store ", m.address(), " attempt ", launch.restart_count);
    r.store_host = m.host;
    std::shared_ptr<Store> tcp = TcpStore::connect(m.host, m.port, {.timeout = timeout});
    r.store =
        std::make_shared<PrefixStore>(agent_store_prefix(launch.restart_count), std::move(tcp));
    return r;
  }
  r.source = m.url;
  if (m.scheme != InitScheme::kFile) r.store_host = m.host;
  r.store = create_store(m, timeout);
  return r;
}

}  // namespace collie
