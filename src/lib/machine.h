/*
 * machine.h - the CPUs a job may use: the CPUs online, the job's affinity
 * (Cpus_allowed_list of /proc/PID/status) and its cgroup's CPU quota
 * (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us, the tightest of
 * the job's cgroup and its ancestors).  `trainmon run` reads it for the
 * job and writes it into meta.json, so that a report knows the machine the
 * job ran on, not the one reading the report.  The advice that proposes a
 * DataLoader worker count (tm_machine_workers_advice) lives here too: one
 * implementation for every rule.  Internal.
 *
 * Every parser takes a buffer and its length; the buffer need not be
 * NUL-terminated and may hold any bytes.
 */
#ifndef TM_MACHINE_H
#define TM_MACHINE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "trainmon.h"

/* A CPU list ("0-3,8,10-11", as in Cpus_allowed_list and
 * /sys/devices/system/cpu/online; a trailing newline is allowed): the
 * number of CPUs in it, or -EINVAL (empty, malformed, a range backwards,
 * a CPU number above 1 << 20). */
int tm_machine_parse_cpulist(const char *buf, size_t len);

/* A cgroup v2 cpu.max ("max 100000", "150000 100000"): 0 with *cpus the
 * quota in CPUs (NAN for "max": no limit), or -EINVAL. */
int tm_machine_parse_cpumax(const char *buf, size_t len, double *cpus);

/* cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us texts: 0 with *cpus
 * the quota in CPUs (NAN for a quota of -1: no limit), or -EINVAL. */
int tm_machine_parse_cfs(const char *quota, size_t qlen, const char *period, size_t plen,
                         double *cpus);

/* /proc/PID/cgroup: copies the path of the v1 hierarchy whose controllers
 * include "cpu" (not "cpuset" or "cpuacct" alone) into out.  1 found, 0
 * not (out ""), -EINVAL for a NULL argument.  A path too long for out is
 * left out. */
int tm_machine_parse_v1_cpu_path(const char *buf, size_t len, char *out, size_t cap);

/* The usable CPUs of m: min(affinity (else online), quota); NAN when
 * neither count is known. */
double tm_machine_usable(const tm_machine *m);

/* How many DataLoader workers per rank fit in usable CPUs shared by ranks
 * training processes: the cores per rank, less the one its training loop
 * keeps when keep_loop_core (a loop that computes most of the time; one
 * that waits for data takes little of its core).  At least 0; NAN when
 * usable is unknown. */
double tm_machine_workers_fit(double usable, size_t ranks, bool keep_loop_core);

/* The advice of a DataLoader worker count, one implementation for every
 * rule that proposes one (the input rules: the loop waits for data, so
 * the workers may have every core): need workers per rank would keep up
 * (why: the arithmetic behind it, "" for none), now are used; usable CPUs
 * (NAN: unknown) are shared by ranks training processes on the host
 * (tm_machine_workers_fit); gpu says whether the job has a GPU to move
 * work to.  Writes the advice into buf and returns the count advised: the
 * need when it fits (or usable is unknown), else what fits, never more.
 * *capped (may be NULL) says whether the need did not fit. */
double tm_machine_workers_advice(char *buf, size_t cap, double need, double now, double usable,
                                 size_t ranks, bool gpu, const char *why, bool *capped);

#endif
