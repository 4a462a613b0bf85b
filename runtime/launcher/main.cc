// collie-run: a torchrun-compatible launcher. See docs/launcher.md.
#include <signal.h>
#include <unistd.h>

#include <exception>
#include <string>
#include <vector>

#include "runtime/launcher/job_secret_setup.h"
#include "runtime/launcher/launch_options.h"
#include "runtime/launcher/launcher.h"
#include "runtime/launcher/worker_stream.h"

int main(int argc, char** argv) {
  // A console that went away must not kill the launcher (and with it the
  // supervision of the workers); writes to it just fail.
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv, argv + argc);
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
