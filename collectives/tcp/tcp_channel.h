// The TCP channel: a Channel over a connected, non-blocking stream socket
// (TCP between hosts; the shared-memory pair's Unix socket when a pair falls
// back). The factory is the folder's one public header.
#pragma once

#include <memory>

#include "collectives/channel.h"
#include "runtime/base/unique_fd.h"

namespace collie {

std::unique_ptr<Channel> make_tcp_channel(UniqueFd fd);

}  // namespace collie
