// The collie-run command line as CLI11 declares it: every flag with its help
// text, its PET_* variable and where its value goes. Values that need
// checking or combining first land as text in FlagText, and
// parse_launch_options (launch_options.cc) validates them in one place.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collie/runtime/launcher/launch_options.h"

namespace CLI {
class App;
}

namespace collie::launcher {

// Flags as given, before validation; the defaults are the flags' defaults.
struct FlagText {
  std::string nnodes = "1";
  std::string nproc = "1";
  std::string rdzv_timeout = "600";
  std::string grace = "5";
  std::string local_ranks_filter;
  std::string tee;
  std::string rdzv_endpoint;
  std::string rdzv_conf;
  std::string rdzv_backend = "static";
  std::string on_failure = "stop";
  std::string ignored;  // torchrun's flags that collie-run accepts and ignores
  bool no_use_env = false;
  bool module = false;
  int master_port = 0;
};

// The parser, filling `o` directly where a flag needs no checking and `f`
// otherwise; both must outlive it. --help, --version and the footer
// included.
std::unique_ptr<CLI::App> make_launch_app(LaunchOptions& o, FlagText& f);

// torchrun's --tee takes a value, but "--tee" alone is the natural way to ask
// for both streams; inserts "3" when the next token is not a stream mask.
// Only the launcher's own flags (before the program path) are looked at.
std::vector<std::string> normalize_tee(const CLI::App& app, std::vector<std::string> args);

}  // namespace collie::launcher
