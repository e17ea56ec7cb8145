#pragma once

// Which machine (kernel boot) this process runs on. Handles to shared memory
// (a /proc/<pid>/fd/<n> path) mean something only on the machine that made
// them: a producer compares this id before mapping one, so a handle that
// reached another machine can never map an unrelated local process's file.

#include <string>

namespace mooncake {

// The kernel's boot id (/proc/sys/kernel/random/boot_id), or "" when it
// cannot be read. Read once per process.
const std::string& MachineId();

}  // namespace mooncake
