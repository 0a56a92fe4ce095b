#!/usr/bin/env bash
# Framework loops under `trainmon run` (issue #14): PyTorch Lightning and
# the Hugging Face Trainer, on the CPU in the torch 2.x virtualenv of `make
# deps` (tests/lib/venv.sh: $VENV_PY, else .venv), tiny models built from code
# or a config (no download).  Skipped with one line when the virtualenv or
# its lightning / transformers is missing (`make deps` installs them where a
# package index is reachable).
#
# The jobs (tests/jobs/lightning_loop.py, tests/jobs/hf_trainer.py; the
# oracle in tests/jobs/fw_oracle.py) print as their last line the
# framework's own optimizer-step count, the training batches that ran, the
# eval batches, and their data-wait share timed inline (the dataset's
# __getitem__ and the collate function, num_workers=0).  Each runs three
# ways: as is (data wait 20-35%), with gradient accumulation over 4 batches
# (JOB_ACCUM=4: Lightning's accumulate_grad_batches, the Trainer's
# gradient_accumulation_steps, which fetches the 4 batches of a step before
# it runs any), and with data that costs nothing (JOB_ITEM_S=0; the Trainer
# only by default, FRAMEWORK_JOBS='lightning_free ...' adds Lightning's:
# each job costs ~10 s of CPU, most of it importing the framework).
# Asserted from `report --json` and `dump --json`:
#   - steps equal the job's count (+-1), every training step ended by the
#     optimizer (no loader steps: accelerate fetches one batch ahead, and
#     the Trainer a whole accumulation group ahead, of the backward pass);
#   - micro-batches summed over the training steps equal the batches the
#     job trained on (+- one accumulation group);
#   - eval batches (Lightning's sanity check and validation every few
#     steps, the Trainer's eval_strategy="steps") recorded apart, phase
#     eval, exactly as many as the job ran, and counted as eval_steps (but
#     the last, if still open at exit), not steps;
#   - the data-wait fraction within 5 points of the job's share;
#   - the input verdict: the loop waits for data it makes on the training
#     thread inside a DataLoader, so input.data_wait (or input.cpu_bound:
#     it is CPU work) when it waits, input.ok when it does not; never
#     input.main_prep (there is a DataLoader) nor input.disk_bound (no disk
#     is read), and no input.* finding but input.ok when the data is free;
#   - with a checkpoint every 10 steps (JOB_CKPT_EVERY=10: Lightning's
#     ModelCheckpoint, the Trainer's save_steps; lightning_ckpt,
#     hf_trainer_ckpt), one checkpoint.save event per checkpoint the
#     framework saved (its own count), made by its saver
#     (Trainer.save_checkpoint, Trainer._save_checkpoint: via lightning /
#     transformers, blocking), and the summary's the same: all but the one
#     at the last step in the loop (checkpoints), that one after it; the
#     Trainer's checkpoint bytes are its folder's, as the job lists it;
#   - a job that only evaluates (lightning_validate: trainer.validate();
#     hf_trainer_evaluate: Trainer.evaluate(); FRAMEWORK_JOBS may name
#     lightning_predict and hf_trainer_predict too) is an inference loop:
#     its batches are its steps, the job's count and wait share, the
#     report's inference_processes 1 and no eval_steps (the previous report
#     of trainer.validate(): "no steps to judge ... iterate a DataLoader");
#     no training job is read as one.
set -u
case ${BUILD:-} in *asan*) echo "skipped: under the sanitizer build (the Python side and the framework jobs are the plain build's; the binary's parsers run under ASan in the other tests)"; exit 77 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
TRAINMON=${TRAINMON:-$root/${BUILD:-build}/trainmon}
[ -x "$TRAINMON" ] || { echo "skipped: $TRAINMON not built"; exit 77; }
. "$root/tests/lib/venv.sh"
PY=$(tm_venv_python)
[ -n "$PY" ] && [ -x "$PY" ] || { echo "skipped: no torch 2.x virtualenv (make deps makes it)"; exit 77; }
scratch=$(mktemp -d /var/tmp/trainmon-fw.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fails=0 ran=0

# check RUN JOB: the report of RUN against the job's own last line
check() {
    local run=$1 job=$2
    "$TRAINMON" report --json "$run" > "$run/report.json" 2> "$run/report.err" ||
        { cat "$run/report.err"; return 1; }
    "$TRAINMON" dump --json "$run"/pid*.tmr > "$run/dump.jsonl" 2>/dev/null
    "$PY" - "$run" "$job" "$root/tests/lib" <<'PYEOF'
import json, sys
run, job = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
import runcheck
free = job.endswith("_free")
oracle, rep, train, evals = runcheck.load(run, '{"steps"')
S = rep["summary"]
bad = []
if not S.get("steps") or S["steps"] != oracle["steps"]:
    bad.append("steps %s, the job counted %s" % (S.get("steps"), oracle["steps"]))
infer = bool(oracle.get("inference"))
if infer != bool(S.get("inference_processes")):
    bad.append("inference_processes %s for a job that %s" % (
        S.get("inference_processes"), "only infers" if infer else "trains"))
bounds = sorted({o.get("boundary") for o in train})
mb = sum(o.get("micro_batches", 0) for o in train)
if infer:
    # validate(), predict(), evaluate() alone: the batches are the steps
    # (recorded as eval under no_grad, or as loader steps where the batch
    # is fetched with grad enabled), none of them training
    if bounds not in ([], ["loader"]) or abs(len(train) + len(evals) - oracle["steps"]) > 1:
        bad.append("%d loader steps %s and %d eval records, the job ran %d batches"
                   % (len(train), bounds, len(evals), oracle["steps"]))
    if S.get("eval_steps"):
        bad.append("eval_steps %s in a job that only evaluates" % S.get("eval_steps"))
    evals, mb = [], oracle["micro_batches"]
elif bounds != ["optimizer"]:
    bad.append("training steps ended by %s, not by the optimizer alone" % bounds)
if not infer and abs(mb - oracle["micro_batches"]) > oracle["accum"]:
    bad.append("%d micro-batches recorded, the job trained on %d" % (mb, oracle["micro_batches"]))
# eval_steps counts complete eval batches: Lightning's last validation run
# (after the last step) fetches no batch after its last one, which is
# still open at exit and not counted
n_ev = oracle["eval_batches"]
if infer:
    pass
elif len(evals) != n_ev or S.get("eval_steps") not in (n_ev, n_ev - 1):
    bad.append("%d eval records (eval_steps %s), the job ran %d eval batches"
               % (len(evals), S.get("eval_steps"), oracle["eval_batches"]))
share, dwf = oracle["data_wait_share"], S.get("data_wait_fraction")
if share is None or dwf is None or abs(dwf - share) > 0.05:
    bad.append("data wait %s, the job's own share %s" % (dwf, share))
ids = {f["id"] for f in rep.get("findings", [])}
inputs = {i for i in ids if i.startswith("input.")}
if free:
    if inputs != {"input.ok"}:
        bad.append("input findings %s for data that costs nothing, not input.ok" % sorted(inputs))
elif share is not None and share > 0.10 and not inputs & {"input.data_wait", "input.cpu_bound"}:
    bad.append("no input.data_wait or input.cpu_bound among %s (it waits %.0f%%)"
               % (sorted(ids), 100 * share))
for w in sorted(inputs & {"input.main_prep", "input.disk_bound"}):
    bad.append("%s among the findings" % w)
# checkpoints: as many as the framework saved, each one save of the
# framework's own saver (its torch.save calls inside it are part of it)
if oracle.get("checkpoints"):
    saves = runcheck.events(run, "checkpoint.save")
    via = {"lightning": "lightning", "hf_trainer": "transformers"}[job.split("_ckpt")[0]]
    # the one at the last step is after the loop (the final model)
    inside, outside = S.get("checkpoints"), S.get("checkpoints_outside_loop")
    if (inside or 0) + (outside or 0) != oracle["checkpoints"] or outside != 1:
        bad.append("%s checkpoints in the loop and %s outside in the summary, the framework "
                   "saved %d, the last after the last step" % (inside, outside, oracle["checkpoints"]))
    if len(saves) != oracle["checkpoints"] or any(e.get("via") != via or not e.get("blocking")
                                                 for e in saves):
        bad.append("save events %s, the framework saved %d with %s"
                   % (json.dumps(saves)[:300], oracle["checkpoints"], via))
    # the bytes of each checkpoint folder, as the job lists its files
    elif oracle.get("save_bytes") and [e.get("bytes") for e in saves] != oracle["save_bytes"]:
        bad.append("checkpoint bytes %s, the job's folders %s"
                   % ([e.get("bytes") for e in saves], oracle["save_bytes"]))
elif S.get("checkpoints"):
    bad.append("%s checkpoints in a job that saved none" % S.get("checkpoints"))
print("  %-15s job steps %-3d micro %-3d evals %-3d share %.3f | report steps %s micro %d evals %d"
      " wait %s findings %s" % (job, oracle["steps"], oracle["micro_batches"], oracle["eval_batches"],
                                share or 0, S.get("steps"), mb, len(evals),
                                None if dwf is None else round(dwf, 3), sorted(ids)))
for b in bad:
    print("  FAIL %s: %s" % (job, b))
sys.exit(1 if bad else 0)
PYEOF
}

echo "frameworks: $PY (torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null))"
for job in ${FRAMEWORK_JOBS:-lightning lightning_accum lightning_ckpt lightning_validate hf_trainer hf_trainer_accum hf_trainer_free hf_trainer_ckpt hf_trainer_evaluate}; do
    case $job in
    lightning*) script=lightning_loop mod=lightning ;;
    hf_trainer*) script=hf_trainer mod=transformers ;;
    *) echo "  FAIL $job: no such job"; fails=$((fails + 1)); continue ;;
    esac
    if ! v=$("$PY" -c "import $mod; print($mod.__version__)" 2>/dev/null); then
        echo "  $job: skipped: $PY has no $mod (make deps installs it)"; continue
    fi
    envs=(HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1)
    case $job in
    *_accum) envs+=(JOB_ACCUM=4) ;;
    *_free) envs+=(JOB_ITEM_S=0) ;;
    *_ckpt) envs+=(JOB_CKPT_EVERY=10) ;;
    *_validate | *_predict | *_evaluate) envs+=(JOB_MODE=${job##*_}) ;;
    esac
    run=$scratch/$job
    ran=$((ran + 1))
    if ! env "${envs[@]}" "$TRAINMON" run -o "$run" -- "$PY" "$root/tests/jobs/$script.py" > "$run.out" 2>&1; then
        tail -n 20 "$run.out"; echo "  FAIL $job: trainmon run failed"; fails=$((fails + 1)); continue
    fi
    check "$run" "$job" || { fails=$((fails + 1)); tail -n 3 "$run.out"; }
done
[ $ran -gt 0 ] || { echo "skipped: $PY has neither lightning nor transformers (make deps installs them)"; exit 77; }
[ $fails -eq 0 ] || { echo "FAIL: $fails of $ran framework jobs"; exit 1; }
echo "PASS: $ran framework jobs: steps, micro-batches, eval and data wait as the frameworks count them"
