#pragma once

// Whether this machine has a CPU to spare at the moment, for a thread that
// would rather spin for a few microseconds than sleep and be woken. The RPC
// transport polls its socket for the next frame only then
// (thrift/rpc_transport.h, --rpc-poll-us).
//
// "Spare" means the threads running or runnable on the machine, the caller
// among them, are no more than the CPUs this process may run on: the
// running count of /proc/loadavg (which includes the thread that reads it)
// against sched_getaffinity. The count is read at most once a millisecond,
// so a caller pays a clock read. Spinning then takes no time from any other
// thread; once threads queue for the CPUs, the caller sleeps as it would
// have anyway. (Fewer than the CPUs, not counting the caller, would stop a
// client and a server on two CPUs from polling while they take turns.)
//
// The running count is the host's (or the VM's), not a container's. Under a
// cgroup CPU quota a spinning thread would spend the quota while the host
// looks idle, so a process under one (cgroup v1 cpu.cfs_quota_us, v2
// cpu.max, in its own cgroup or any above) never sees a spare CPU.
//
// Thread-safety: every function may be called from any thread.

#include <filesystem>
#include <optional>
#include <string_view>

namespace mooncake {

// True when a CPU is spare now (see above).
bool SpareCpuNow();

// The CPUs this process may run on (sched_getaffinity; at least 1).
int AllowedCpus();
// The CPUs' worth of time this process may use: AllowedCpus(), or fewer
// under a cgroup CPU quota (its CPUs rounded up; at least 1). Read once.
int UsableCpus();

// Why SpareCpuNow() is false for good in this process ("a cgroup CPU quota
// applies", "cannot read /proc/loadavg"), or empty when it is measured.
std::string_view SpareCpuUnavailableReason();

// Makes SpareCpuNow() answer `spare` (nullopt: measure again), so that a
// test can force or forbid what depends on it.
void ForceSpareCpuForTesting(std::optional<bool> spare);

// The running count of a /proc/loadavg line: "0.62 1.48 1.52 1/80 31836"
// gives 1. nullopt when the line has another form.
std::optional<int> ParseRunningThreads(std::string_view loadavg);

// The tightest CPU quota of the cgroups that /proc/self/cgroup (its text in
// `self_cgroup`) names for this process and those above them up to the
// root, looking under `cgroup_mount` (normally /sys/fs/cgroup): cgroup v2's
// cpu.max other than "max", or v1's cpu.cfs_quota_us above 0. In CPUs
// (quota / period: "150000 100000" is 1.5), or nullopt when none applies. A
// quota whose value does not parse counts as one CPU.
std::optional<double> CgroupCpuLimit(std::string_view self_cgroup,
                                     const std::filesystem::path& cgroup_mount);

}  // namespace mooncake
