// weft/io/io.hpp: everything public in weft's I/O layer (target weft::io).
#pragma once

#include "weft/io/asio_executor.hpp"
#include "weft/io/cancel.hpp"
#include "weft/io/error.hpp"
#include "weft/io/io_pool.hpp"
#include "weft/io/resolve.hpp"
#include "weft/io/signal.hpp"
#include "weft/io/sleep.hpp"
#include "weft/io/tcp.hpp"
#include "weft/io/udp.hpp"
#include "weft/io/uring_context.hpp"
#include "weft/io/use_task.hpp"
#include "weft/io/with_timeout.hpp"
