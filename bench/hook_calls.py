"""What a call through a trainmon Hook costs over torch's own call, per way
torch's code calls the function the Hook wraps (bench/agent_cost.py adds
it to the agent's own instructions, per Hook call of a step).

    python hook_calls.py STYLE N CGMARK_SO plain|hook

under `valgrind --tool=callgrind --instr-atstart=no`: N calls in one
block bracketed by cg_begin/cg_end, after 1,000 uncounted ones.  The Hook
is a pass-through one (kind "fetch" once its get_worker_info said None:
a flag test, then the call of the wrapped function from C), so the
difference between the two blocks is the cost of the call through a Hook:
its dispatch and the C-to-Python call of the original (a new evaluation
loop, where torch's own Python-to-Python call is made inline).  STYLE:

  method  obj.f(i), f a class attribute (the optimizer's step, the
          dataset fetcher's fetch)
  kwcall  f(i, k=1) from a Python function (Tensor.backward calling
          torch.autograd.backward)
  slot    next(it), __next__ a class attribute (DataLoader __next__,
          called from the interpreter's slot in C either way)
"""
import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from trainmon import _trainmon as _c  # noqa: E402

STYLES = ("method", "kwcall", "slot")


def f(self, i):
    return i


def g(i, k=None):
    return i


def main():
    style, n, so, which = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if style not in STYLES or which not in ("plain", "hook"):
        sys.exit("hook_calls.py: STYLE one of %s, then plain or hook" % ", ".join(STYLES))
    wrap = (lambda fn: _c.hook("fetch", fn, lambda: None)) if which == "hook" else (lambda fn: fn)

    def nxt(self):
        return 1

    class Obj:
        m = wrap(f)
        __next__ = wrap(nxt)
    gg = wrap(g)

    def kw(i):
        return gg(i, k=1)

    o = Obj()

    def run(count):
        if style == "method":
            for i in range(count):
                o.m(i)
        elif style == "kwcall":
            for i in range(count):
                kw(i)
        else:
            for i in range(count):
                next(o)

    cg = ctypes.CDLL(so)
    cg.cg_end.argtypes = [ctypes.c_char_p]
    if not cg.cg_running():
        sys.exit("hook_calls.py: not running under valgrind")
    run(1000)
    cg.cg_begin()
    run(n)
    cg.cg_end(which.encode())


if __name__ == "__main__":
    main()
