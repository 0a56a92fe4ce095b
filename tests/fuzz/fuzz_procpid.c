/*
 * fuzz_procpid.c - libFuzzer target for the /proc/PID parsers of the
 * process-tree collector: stat (with RSS), io, smaps_rollup (Pss) and
 * children lists.  Every parser sees every input; the input is not
 * NUL-terminated, so a read past its end is caught by ASan.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ptree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    tm_procinfo p;
    memset(&p, 0, sizeof p);
    uint64_t nthreads = 0;
    if (tm_parse_proc_stat(buf, size, &p, &nthreads) == 0) {
        if (strnlen(p.comm, sizeof p.comm) >= sizeof p.comm || p.pid <= 0 || p.ppid < 0 ||
            !(p.valid & TM_PROC_HAVE_STAT))
            __builtin_trap();
    }
    tm_parse_proc_io(buf, size, &p);
    uint64_t v;
    tm_parse_kb_field(buf, size, "VmRSS", &v);
    tm_parse_smaps_pss(buf, size, &v);
    pid_t pids[4];
    for (int complete = 0; complete < 2; complete++) {
        size_t n = tm_parse_pid_list(buf, size, complete, pids, 4);
        for (size_t i = 0; i < n && i < 4; i++)
            if (pids[i] <= 0)
                __builtin_trap();
    }
    return 0;
}
