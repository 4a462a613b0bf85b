// collie-run: a torchrun-compatible launcher. See docs/launcher.md.
#include <signal.h>
#include <unistd.h>

#include <exception>
#include <string>
#include <vector>

#include "collie/runtime/launcher/fr_status.h"
#include "collie/runtime/launcher/job_secret_setup.h"
#include "collie/runtime/launcher/launch_options.h"
#include "collie/runtime/launcher/launcher.h"
#include "collie/runtime/launcher/worker_stream.h"

int main(int argc, char** argv) {
  // A console that went away must not kill the launcher (and with it the
  // supervision of the workers); writes to it just fail.
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv, argv + argc);
  // `collie-run --status PID`: what the workers of the running collie-run
  // PID are doing (docs/troubleshooting.md); launches nothing.
  if (args.size() >= 2 && args[1] == "--status") {
    if (args.size() != 3 || args[2].find_first_not_of("0123456789") != std::string::npos) {
      collie::launcher::write_all(STDERR_FILENO,
                                  "usage: collie-run --status PID (a running collie-run's pid)\n");
      return 2;
    }
    return collie::launcher::run_status_query(static_cast<pid_t>(std::stol(args[2])));
  }
  auto parsed = collie::launcher::parse_launch_options(args);
  if (!parsed.options) {
    collie::launcher::write_all(parsed.exit_code == 0 ? STDOUT_FILENO : STDERR_FILENO,
                                parsed.message);
    return parsed.exit_code;
  }
  try {
    parsed.options->secret_source = collie::launcher::set_up_job_secret(*parsed.options);
    return collie::launcher::Launcher(std::move(*parsed.options)).run();
  } catch (const std::exception& e) {
    collie::launcher::write_all(STDERR_FILENO, std::string("collie-run: ") + e.what() + "\n");
    return 1;
  }
}
