# gloo_exit.sh - torch's gloo process group aborting a rank as it exits.
#
#   . tests/lib/gloo_exit.sh
#   tm_gloo_exit_abort NRANKS FILE...   # true: that happened, after the work
#
# Under torch 2.13, a rank of tests/jobs/ddp_straggler.py sometimes dies
# as its process exits, its training done and its oracle line printed:
# "terminate called without an active exception" (SIGABRT), and torchrun
# fails the job.  It is torch's, not trainmon's: the same job under plain
# torchrun, without trainmon, did it in 1 of 20 runs (2026-12-04; 3 of 12
# before the job waited at a barrier before destroy_process_group).  The
# DDP tests run a job that failed so once more, saying so; any other
# failure, or a second one, fails the test.  True when FILE... (the job's
# output) has that line and NRANKS oracle lines ({"steps": ...}).

tm_gloo_exit_abort() {
    local n=$1
    shift
    grep -q "terminate called without an active exception" "$@" 2>/dev/null || return 1
    [ "$(cat "$@" 2>/dev/null | grep -c '^{"steps"')" -ge "$n" ]
}
