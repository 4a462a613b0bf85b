// An environment for tests that must not touch the real one: a table of
// variables as an EnvLookup (rendezvous/env/launch_env.h), for
// detect_launch_env(), slurm_placement(), scheduler_secret() and the like.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "collie/rendezvous/env/launch_env.h"

namespace collie::test {

using EnvTable = std::map<std::string, std::string>;

inline EnvLookup env_table(const EnvTable& env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace collie::test
