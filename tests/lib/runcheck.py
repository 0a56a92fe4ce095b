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
    recs = list(_dumped(run, "step"))
    train = [o for o in recs if o.get("phase") != "eval"]
    evals = [o for o in recs if o.get("phase") == "eval"]
    return oracle, rep, train, evals


def _dumped(run, kind):
    """The records of RUN/dump.jsonl of one type (lines that are no JSON
    skipped)."""
    for line in open(run + "/dump.jsonl"):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("type") == kind:
            yield o


def events(run, name):
    """The details (parsed JSON) of RUN's events called name."""
    return [json.loads(o["json"]) for o in _dumped(run, "event") if o.get("name") == name]
