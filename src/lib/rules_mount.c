/*
 * rules_mount.c - data.hung_mount: a -d path whose filesystem did not
 * answer when `trainmon run` started (its stat() still blocked after
 * TM_BLKDEV_RESOLVE_WAIT_S, in a child process: deadline.c).  That is a
 * hung mount: an NFS mount whose server is gone (a `hard` mount waits
 * forever), a FUSE filesystem (sshfs, s3fs, gcsfuse) whose daemon stopped.
 * The job's own reads of it block the same way, in the kernel, so a job
 * that made no step is stuck there; trainmon left the path out of its
 * disk and cache measures and started the job (docs/DIAGNOSIS.md,
 * "data.hung_mount").
 */
#include <math.h>
#include <stdio.h>

#include "rules.h"

void tm_rule_data_hung_mount(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (!S->data_hung)
        return;
    bool none = S->steps_total == 0;
    const char *path = S->data_hung_path[0] ? S->data_hung_path : "?";
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_str(&e, "path", path);
    tm_an_ev_num(&e, "paths", (double)S->data_hung);
    tm_an_ev_num(&e, "waited_s", S->data_hung_wait_s);
    tm_an_ev_num(&e, "steps", (double)S->steps_total);
    char title[512], advice[1024], more[64] = "";
    if (S->data_hung > 1)
        snprintf(more, sizeof more, " (and %zu more)", S->data_hung - 1);
    snprintf(title, sizeof title,
             "the data path %s%s did not answer within %.0f s when the run started: a hung "
             "mount%s",
             path, more, isnan(S->data_hung_wait_s) ? 10.0 : S->data_hung_wait_s,
             none ? ", and the job made no step (a job that reads it blocks there)"
                  : "; the job made steps, so it answered later or was not read");
    snprintf(advice, sizeof advice,
             "`stat %s` blocks the same way.  Check what serves it: an NFS server "
             "(`showmount -e SERVER`, `rpcinfo -p SERVER`; a `hard` mount waits for it forever, "
             "`soft,timeo=N,retrans=M` returns an error instead) or a FUSE daemon (sshfs, s3fs, "
             "gcsfuse: restart it, then `umount -l` the stale mount).  trainmon left the path "
             "out of its disk and page-cache measures.",
             path);
    tm_an_add(an, none ? TM_SEV_HIGH : TM_SEV_MEDIUM, TM_CONF_HIGH, -1, &e, title, advice);
}
