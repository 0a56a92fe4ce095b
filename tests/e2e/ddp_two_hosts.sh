#!/usr/bin/env bash
# torchrun DDP across two "hosts" (issue #10): two network namespaces made
# here, joined by a veth pair, each with its own hostname (a UTS namespace),
# each running `trainmon run -- torchrun --nnodes 2 --node_rank N
# --master_addr <node 0's address>` of tests/jobs/ddp_straggler.py (gloo,
# one rank per node, rank 1 slowed in its data path).  The two run
# directories merged by `trainmon report A B` must name the slow rank, its
# host and its cause, and blame nothing on rank 0.  Needs root (ip netns)
# and the torch 2.x virtualenv; skipped with one line otherwise.  Everything
# made here is removed on exit, failure included.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
TRAINMON=${TRAINMON:-$root/${BUILD:-build}/trainmon}
[ -x "$TRAINMON" ] || { echo "skipped: $TRAINMON not built"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "skipped: needs root (network namespaces)"; exit 77; }
command -v ip > /dev/null && command -v unshare > /dev/null || { echo "skipped: no ip or unshare"; exit 77; }
. "$root/tests/lib/venv.sh"
venv=$(tm_venv_python)
[ -n "$venv" ] && "$venv" -c 'import torch.distributed as d; assert d.is_available()' 2>/dev/null ||
    { echo "skipped: no virtualenv with torch.distributed (make deps makes .venv)"; exit 77; }

tag=tm$$
nsA=${tag}a nsB=${tag}b
scratch=$(mktemp -d /var/tmp/trainmon-2hosts.XXXXXX)
cleanup() {
    ip netns pids "$nsA" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns pids "$nsB" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$nsA" 2>/dev/null
    ip netns del "$nsB" 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

ip netns add "$nsA" && ip netns add "$nsB" || fail "ip netns add"
ip link add "${tag}va" type veth peer name "${tag}vb" || fail "veth"
ip link set "${tag}va" netns "$nsA" && ip link set "${tag}vb" netns "$nsB" || fail "veth into the namespaces"
ip -n "$nsA" addr add 10.231.0.1/24 dev "${tag}va" && ip -n "$nsB" addr add 10.231.0.2/24 dev "${tag}vb" ||
    fail "addresses"
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
ip -n "$nsA" link set "${tag}va" up && ip -n "$nsB" link set "${tag}vb" up || fail "link up"

node() { # ns node_rank hostname ifname run
    ip netns exec "$1" unshare --uts sh -c 'hostname "$0"; exec "$@"' "$3" \
        env JOB_SLOW=data JOB_SLOW_RANK=1 GLOO_SOCKET_IFNAME="$4" \
        "$TRAINMON" run -o "$5" -- "$venv" -m torch.distributed.run --nnodes 2 --nproc_per_node 1 \
        --node_rank "$2" --master_addr 10.231.0.1 --master_port "$port" \
        "$root/tests/jobs/ddp_straggler.py" > "$5.out" 2>&1
}
. "$root/tests/lib/gloo_exit.sh"
for try in 1 2; do
    rm -rf "$scratch/A" "$scratch/B"
    port=$((29500 + RANDOM % 2000))
    node "$nsA" 0 hosta "${tag}va" "$scratch/A" & pa=$!
    node "$nsB" 1 hostb "${tag}vb" "$scratch/B" & pb=$!
    wait $pa; ra=$?
    wait $pb; rb=$?
    [ $ra -ne 0 ] || [ $rb -ne 0 ] || break
    [ $try -eq 1 ] && tm_gloo_exit_abort 2 "$scratch/A.out" "$scratch/B.out" || break
    echo "torch's gloo aborted a rank at exit, its work done (torch's, seen without trainmon: tests/lib/gloo_exit.sh); once more"
done
[ $ra -eq 0 ] && [ $rb -eq 0 ] || { tail -n 15 "$scratch/A.out" "$scratch/B.out"; fail "the job failed (node 0: $ra, node 1: $rb)"; }
ls "$scratch"/A/rank0.tmr "$scratch"/B/rank1.tmr > /dev/null || fail "one record file per rank: $(ls "$scratch"/A "$scratch"/B)"
"$TRAINMON" report --json "$scratch/A" "$scratch/B" > "$scratch/report.json" || fail "trainmon report A B"
"$venv" - "$scratch/report.json" <<'PY' || { "$TRAINMON" report "$scratch/A" "$scratch/B" | tail -20; exit 1; }
import json, sys
rep = json.load(open(sys.argv[1]))
ranks = {r["rank"]: r for r in rep["summary"]["ranks"]}
assert {r: ranks[r]["host"] for r in ranks} == {"0": "hosta", "1": "hostb"}, ranks
st = [f for f in rep["findings"] if f["id"] == "ranks.straggler"]
assert len(st) == 1, [f["id"] for f in rep["findings"]]
f = st[0]
assert f["rank"] == 1 and f["evidence"]["cause"] == "data", f
assert f["evidence"]["host"] == "hostb" and "on hostb" in f["title"], f
assert not [g for g in rep["findings"] if g["id"].startswith("ranks.") and g.get("rank") == 0]
print("  merged report: rank 1 on %s is the straggler (cause %s), sync waits %s"
      % (ranks["1"]["host"], f["evidence"]["cause"], f["evidence"]["per_rank_sync_wait_s"]))
PY
echo "PASS: two hosts (network namespaces) merged: the slow rank, its host and cause named"
