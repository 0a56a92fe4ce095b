"""runcheck.py - what the real-loop and framework e2e tests
(tests/e2e/real_loops.sh, frameworks.sh) compare for one run RUN of a job:
the job's own account (the last line of RUN.out that starts with PREFIX, a
JSON object the job printed), the report (RUN/report.json) and the step
records of the training processes (RUN/dump.jsonl), split into training
and eval steps."""
import json


def load(run, prefix="{"):
    """(oracle, report, train steps, eval steps) of RUN."""
    out = [line for line in open(run + ".out") if line.startswith(prefix)]
    oracle = json.loads(out[-1])
    rep = json.load(open(run + "/report.json"))
    recs = []
    for line in open(run + "/dump.jsonl"):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("type") == "step":
            recs.append(o)
    train = [o for o in recs if o.get("phase") != "eval"]
    evals = [o for o in recs if o.get("phase") == "eval"]
    return oracle, rep, train, evals
