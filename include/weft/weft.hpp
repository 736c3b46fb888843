// weft/weft.hpp: everything public in weft's core.
#pragma once

#include "weft/config.hpp"
#include "weft/executor.hpp"
#include "weft/fiber.hpp"
#include "weft/fork_group.hpp"
#include "weft/pool.hpp"
#include "weft/post.hpp"
#include "weft/resume_on.hpp"
#include "weft/spawn.hpp"
#include "weft/spawn_many.hpp"
#include "weft/spawn_tuple.hpp"
#include "weft/sync_wait.hpp"
#include "weft/task.hpp"
#include "weft/yield.hpp"
