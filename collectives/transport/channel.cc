// Channel's few shared definitions (channel.h): the default read_to(), for
// channels that cannot hand out their bytes where they lie, and the kind's
// name.
#include "collie/collectives/transport/channel.h"

#include <algorithm>

namespace collie {

ssize_t Channel::read_to(size_t bytes, const ReadSink& sink) {
  uint8_t buf[16 << 10];
  const ssize_t r = read(buf, std::min(bytes, sizeof buf));
  if (r > 0) sink(buf, static_cast<size_t>(r));
  return r;
}

std::string_view to_string(ChannelKind kind) { return kind == ChannelKind::kShm ? "shm" : "tcp"; }

}  // namespace collie
