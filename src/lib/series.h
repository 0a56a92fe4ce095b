/*
 * series.h - the names of every series the sampler records (system.tmr).
 *
 * One definition of each name: the writers (sysrec.c, sysrec_procs.c, the
 * collectors) and the readers (analysis, report writers, exports) use these
 * constants, so a rename is one edit here and a typo is a compile error,
 * not a silently empty chart.  Names are "<family>.<quantity>" in base
 * units (bytes, seconds, ratios); docs/FORMAT.md lists them with their
 * units and labels.  Internal.
 */
#ifndef TM_SERIES_H
#define TM_SERIES_H

/* cgroup */
#define TM_SER_CGROUP_IO_FULL_AVG10 "cgroup.io.full_avg10"
#define TM_SER_CGROUP_IO_FULL_AVG60 "cgroup.io.full_avg60"
#define TM_SER_CGROUP_IO_FULL_SECONDS_TOTAL "cgroup.io.full_seconds_total"
#define TM_SER_CGROUP_IO_SOME_AVG10 "cgroup.io.some_avg10"
#define TM_SER_CGROUP_IO_SOME_AVG60 "cgroup.io.some_avg60"
#define TM_SER_CGROUP_IO_SOME_SECONDS_TOTAL "cgroup.io.some_seconds_total"
#define TM_SER_CGROUP_READ_BYTES_TOTAL "cgroup.read_bytes_total"
#define TM_SER_CGROUP_READS_TOTAL "cgroup.reads_total"
#define TM_SER_CGROUP_WRITE_BYTES_TOTAL "cgroup.write_bytes_total"
#define TM_SER_CGROUP_WRITES_TOTAL "cgroup.writes_total"

/* dataset (collect_dscache.c), labelled at=start|end */
#define TM_SER_DATASET_BYTES "dataset.bytes"
#define TM_SER_DATASET_CACHED_BYTES "dataset.cached_bytes"
#define TM_SER_DATASET_CACHED_FRACTION "dataset.cached_fraction"
#define TM_SER_DATASET_FILES "dataset.files"
#define TM_SER_DATASET_FILES_MEASURED "dataset.files_measured"
#define TM_SER_DATASET_MEMORY_BYTES "dataset.memory_bytes"
#define TM_SER_DATASET_WALK_COMPLETE "dataset.walk_complete"

/* disk */
#define TM_SER_DISK_DISCARD_AWAIT_SECONDS "disk.discard_await_seconds"
#define TM_SER_DISK_DISCARD_BYTES_PER_SECOND "disk.discard_bytes_per_second"
#define TM_SER_DISK_DISCARDS_PER_SECOND "disk.discards_per_second"
#define TM_SER_DISK_FLUSH_AWAIT_SECONDS "disk.flush_await_seconds"
#define TM_SER_DISK_FLUSHES_PER_SECOND "disk.flushes_per_second"
#define TM_SER_DISK_QUEUE_DEPTH "disk.queue_depth"
#define TM_SER_DISK_READ_AWAIT_SECONDS "disk.read_await_seconds"
#define TM_SER_DISK_READ_BYTES_PER_SECOND "disk.read_bytes_per_second"
#define TM_SER_DISK_READ_MERGES_PER_SECOND "disk.read_merges_per_second"
#define TM_SER_DISK_READ_REQUEST_BYTES "disk.read_request_bytes"
#define TM_SER_DISK_READS_PER_SECOND "disk.reads_per_second"
#define TM_SER_DISK_UTILIZATION "disk.utilization"
#define TM_SER_DISK_WRITE_AWAIT_SECONDS "disk.write_await_seconds"
#define TM_SER_DISK_WRITE_BYTES_PER_SECOND "disk.write_bytes_per_second"
#define TM_SER_DISK_WRITE_MERGES_PER_SECOND "disk.write_merges_per_second"
#define TM_SER_DISK_WRITE_REQUEST_BYTES "disk.write_request_bytes"
#define TM_SER_DISK_WRITES_PER_SECOND "disk.writes_per_second"

/* gpu */
#define TM_SER_GPU_MEMORY_FREE_BYTES "gpu.memory_free_bytes"
#define TM_SER_GPU_MEMORY_RESERVED_BYTES "gpu.memory_reserved_bytes"
#define TM_SER_GPU_MEMORY_TOTAL_BYTES "gpu.memory_total_bytes"
#define TM_SER_GPU_MEMORY_USED_BYTES "gpu.memory_used_bytes"
#define TM_SER_GPU_MEMORY_UTILIZATION "gpu.memory_utilization"
#define TM_SER_GPU_PCIE_RX_BYTES_PER_SECOND "gpu.pcie_rx_bytes_per_second"
#define TM_SER_GPU_PCIE_TX_BYTES_PER_SECOND "gpu.pcie_tx_bytes_per_second"
#define TM_SER_GPU_POWER_WATTS "gpu.power_watts"
#define TM_SER_GPU_PROCESS_MEMORY_BYTES "gpu.process_memory_bytes"
#define TM_SER_GPU_PROCESS_SM_UTILIZATION "gpu.process_sm_utilization"
#define TM_SER_GPU_SM_CLOCK_HERTZ "gpu.sm_clock_hertz"
#define TM_SER_GPU_TEMPERATURE_CELSIUS "gpu.temperature_celsius"
#define TM_SER_GPU_THROTTLE_REASONS "gpu.throttle_reasons"
#define TM_SER_GPU_UTILIZATION "gpu.utilization"

/* proc */
#define TM_SER_PROC_ALIVE "proc.alive"
#define TM_SER_PROC_CACHE_HIT_HINT "proc.cache_hit_hint"
#define TM_SER_PROC_CPU_SYSTEM_SECONDS_TOTAL "proc.cpu_system_seconds_total"
#define TM_SER_PROC_CPU_USER_SECONDS_TOTAL "proc.cpu_user_seconds_total"
#define TM_SER_PROC_CPU_UTILIZATION "proc.cpu_utilization"
#define TM_SER_PROC_PROCESS_CPU_UTILIZATION "proc.process_cpu_utilization"
#define TM_SER_PROC_PROCESS_PSS_BYTES "proc.process_pss_bytes"
#define TM_SER_PROC_PROCESS_RCHAR_BYTES_PER_SECOND "proc.process_rchar_bytes_per_second"
#define TM_SER_PROC_PROCESS_READ_BYTES_PER_SECOND "proc.process_read_bytes_per_second"
#define TM_SER_PROC_PROCESS_RSS_BYTES "proc.process_rss_bytes"
#define TM_SER_PROC_PROCESS_STATE_D "proc.process_state_d"
#define TM_SER_PROC_PROCESSES "proc.processes"
#define TM_SER_PROC_PROCESSES_D_STATE "proc.processes_d_state"
#define TM_SER_PROC_PSS_BYTES "proc.pss_bytes"
#define TM_SER_PROC_RCHAR_BYTES_PER_SECOND "proc.rchar_bytes_per_second"
#define TM_SER_PROC_RCHAR_BYTES_TOTAL "proc.rchar_bytes_total"
#define TM_SER_PROC_READ_BYTES_PER_SECOND "proc.read_bytes_per_second"
#define TM_SER_PROC_READ_BYTES_TOTAL "proc.read_bytes_total"
#define TM_SER_PROC_RSS_BYTES "proc.rss_bytes"
#define TM_SER_PROC_WRITE_BYTES_PER_SECOND "proc.write_bytes_per_second"
#define TM_SER_PROC_WRITE_BYTES_TOTAL "proc.write_bytes_total"

/* psi */
#define TM_SER_PSI_CPU_FULL_AVG10 "psi.cpu.full_avg10"
#define TM_SER_PSI_CPU_FULL_AVG60 "psi.cpu.full_avg60"
#define TM_SER_PSI_CPU_FULL_SECONDS_TOTAL "psi.cpu.full_seconds_total"
#define TM_SER_PSI_CPU_SOME_AVG10 "psi.cpu.some_avg10"
#define TM_SER_PSI_CPU_SOME_AVG60 "psi.cpu.some_avg60"
#define TM_SER_PSI_CPU_SOME_SECONDS_TOTAL "psi.cpu.some_seconds_total"
#define TM_SER_PSI_IO_FULL_AVG10 "psi.io.full_avg10"
#define TM_SER_PSI_IO_FULL_AVG60 "psi.io.full_avg60"
#define TM_SER_PSI_IO_FULL_SECONDS_TOTAL "psi.io.full_seconds_total"
#define TM_SER_PSI_IO_SOME_AVG10 "psi.io.some_avg10"
#define TM_SER_PSI_IO_SOME_AVG60 "psi.io.some_avg60"
#define TM_SER_PSI_IO_SOME_SECONDS_TOTAL "psi.io.some_seconds_total"
#define TM_SER_PSI_MEMORY_FULL_AVG10 "psi.memory.full_avg10"
#define TM_SER_PSI_MEMORY_FULL_AVG60 "psi.memory.full_avg60"
#define TM_SER_PSI_MEMORY_FULL_SECONDS_TOTAL "psi.memory.full_seconds_total"
#define TM_SER_PSI_MEMORY_SOME_AVG10 "psi.memory.some_avg10"
#define TM_SER_PSI_MEMORY_SOME_AVG60 "psi.memory.some_avg60"
#define TM_SER_PSI_MEMORY_SOME_SECONDS_TOTAL "psi.memory.some_seconds_total"

/* vm (collect_vmstat.c) */
#define TM_SER_VM_DIRTY_BYTES "vm.dirty_bytes"
#define TM_SER_VM_MAJOR_FAULTS_PER_SECOND "vm.major_faults_per_second"
#define TM_SER_VM_PAGE_CACHE_BYTES "vm.page_cache_bytes"
#define TM_SER_VM_PAGE_CACHE_REFAULTS_PER_SECOND "vm.page_cache_refaults_per_second"
#define TM_SER_VM_PAGEIN_BYTES_PER_SECOND "vm.pagein_bytes_per_second"

/* Prefixes of families whose members are matched by prefix. */
#define TM_SER_PROC_PROCESS_PREFIX "proc.process_"
#define TM_SER_GPU_PREFIX "gpu."

#endif
