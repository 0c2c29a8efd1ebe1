"""mpi4py's own test runner (test/main.py of the mpi4py sdist) with what a
CI run of it needs: each test's result in a file per rank, a watchdog per
test, and tests left out by id. scripts/mpi4py-suite.sh starts it under
mpirun, one per rank:

    python3 scripts/mpi4py-run.py --test-dir DIR --out OUTDIR
        [--timeout S] [--skip-file FILE] [-- MAIN.PY ARGS...]

- OUTDIR/results.RANK: "start ID" when a test starts, then "RESULT ID
  SECONDS" with RESULT one of ok, fail, error, skip, xfail, xpass;
  "hang ID SECONDS" when the watchdog fired.
- The watchdog: a test that runs longer than S seconds (default 60) is
  named on stderr ("mpi4py-run: HANG rank R: ID ran past S s"), every
  thread's stack is printed, and the rank exits with status 3, which ends
  the job (mpirun aborts the others).
- --skip-file: test ids (unittest's, module.Class.method), one a line, or
  fnmatch patterns of them; such tests are not run on any rank (every rank
  reads the same file, so collective tests stay matched). Lines starting
  with '#' are comments.

- --log PREFIX: the rank's stdout and stderr go to PREFIX.RANK.
- MPI4PY_RUN_GDB=1 in the environment: a hang also prints gdb's native
  backtrace of every thread of the rank.

Everything else is main.py's: its options (-v, -f, -k, -i, -e, test
names) pass through.

Two more forms read the result files (scripts/mpi4py-suite.sh):

    python3 scripts/mpi4py-run.py summary OUTDIR
        each test's result over all ranks; prints the counts
    python3 scripts/mpi4py-run.py seen OUTDIR
        every test id that any rank started (the skip list of a restart)
    python3 scripts/mpi4py-run.py compare REFDIR OUTDIR [MTLDIR]
        fails (exit 1) unless every test that passed in REFDIR passed in
        OUTDIR (one skipped in REFDIR may be skipped in OUTDIR), except
        those that do not pass in MTLDIR either (listed)
"""

import argparse
import faulthandler
import fnmatch
import importlib.util
import os
import sys
import threading
import time
import unittest


def parse():
    p = argparse.ArgumentParser(add_help=True)
    p.add_argument("--test-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--skip-file", default=None)
    p.add_argument("--log", default=None)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    a = p.parse_args()
    if a.rest and a.rest[0] == "--":
        a.rest = a.rest[1:]
    return a


def rank():
    for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        if v in os.environ:
            return int(os.environ[v])
    return 0


def main():
    a = parse()
    me = rank()
    os.makedirs(a.out, exist_ok=True)
    if a.log:
        fd = os.open(f"{a.log}.{me}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    rec = open(os.path.join(a.out, f"results.{me}"), "a", buffering=1)

    skip_exact, skip_glob = set(), []
    if a.skip_file and os.path.exists(a.skip_file):
        for line in open(a.skip_file):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if any(c in line for c in "*?["):
                skip_glob.append(line)
            else:
                skip_exact.add(line)

    def skipped(tid):
        return tid in skip_exact or any(fnmatch.fnmatchcase(tid, g) for g in skip_glob)

    current = {"id": None, "t0": 0.0, "timer": None}

    def fire(tid, t0):
        took = time.monotonic() - t0
        rec.write(f"hang {tid} {took:.1f}\n")
        rec.flush()
        sys.stderr.write(f"\nmpi4py-run: HANG rank {me}: {tid} ran past {a.timeout:.0f} s\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        if os.environ.get("MPI4PY_RUN_GDB"):
            # The native stacks too (the provider's threads), for a report.
            import subprocess
            subprocess.run(["gdb", "-p", str(os.getpid()), "-batch", "-ex", "thread apply all bt"],
                           stdout=sys.stderr, stderr=subprocess.DEVNULL, timeout=60, check=False)
            sys.stderr.flush()
        os._exit(3)

    # unittest.TestCase.run, wrapped: tests of the skip file are not run
    # (and not counted), every other one runs under the watchdog.
    orig_run = unittest.TestCase.run

    def run(self, result=None):
        tid = self.id()
        if skipped(tid):
            return result
        t0 = time.monotonic()
        rec.write(f"start {tid}\n")
        timer = threading.Timer(a.timeout, fire, (tid, t0))
        timer.daemon = True
        timer.start()
        # The C-level backstop, should the Python timer not get the GIL.
        faulthandler.dump_traceback_later(a.timeout + 15, exit=True, file=sys.stderr)
        try:
            return orig_run(self, result)
        finally:
            timer.cancel()
            faulthandler.cancel_dump_traceback_later()

    unittest.TestCase.run = run

    class Result(unittest.TextTestResult):
        def _note(self, what, test):
            t0 = getattr(test, "_mpi4py_run_t0", None)
            took = time.monotonic() - t0 if t0 else 0.0
            rec.write(f"{what} {test.id()} {took:.2f}\n")

        def startTest(self, test):
            test._mpi4py_run_t0 = time.monotonic()
            super().startTest(test)

        def addSuccess(self, test):
            super().addSuccess(test)
            self._note("ok", test)

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._note("fail", test)

        def addError(self, test, err):
            super().addError(test, err)
            self._note("error", test)

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            self._note("skip", test)

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            self._note("xfail", test)

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            self._note("xpass", test)

    class Runner(unittest.TextTestRunner):
        resultclass = Result

    sys.path.insert(0, a.test_dir)
    spec = importlib.util.spec_from_file_location("main", os.path.join(a.test_dir, "main.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.dont_write_bytecode = True
    sys.argv = [os.path.join(a.test_dir, "main.py")] + a.rest
    try:
        mod.main(module=None, testRunner=Runner)
    finally:
        # MPI_Finalize runs at exit (mpi4py's atexit): bounded as well.
        faulthandler.dump_traceback_later(max(a.timeout, 60), exit=True, file=sys.stderr)


# ---- reading the result files ---------------------------------------------

# Worst first: a test's result over all ranks is the worst of its ranks'.
ORDER = ["hang", "died", "error", "fail", "xpass", "notrun", "skip", "ok"]


def load(outdir):
    """{test id: result over all ranks}, and the ranks' count."""
    per_rank = []
    for name in sorted(os.listdir(outdir)):
        if not name.startswith("results."):
            continue
        status, pending = {}, set()
        for line in open(os.path.join(outdir, name)):
            parts = line.split()
            if len(parts) < 2:
                continue
            what, tid = parts[0], parts[1]
            if what == "start":
                pending.add(tid)
            else:
                pending.discard(tid)
                status[tid] = "ok" if what == "xfail" else what
        for tid in pending:
            status.setdefault(tid, "died")
        per_rank.append(status)
    ids = set().union(*per_rank) if per_rank else set()
    out = {}
    for tid in ids:
        rs = [st.get(tid, "notrun") for st in per_rank]
        out[tid] = min(rs, key=ORDER.index)
    return out, len(per_rank)


def summary(outdir):
    res, ranks = load(outdir)
    counts = {k: 0 for k in ORDER}
    for r in res.values():
        counts[r] += 1
    line = ", ".join(f"{counts[k]} {k}" for k in ORDER if counts[k] or k in ("ok", "skip"))
    print(f"{len(res)} tests on {ranks} ranks: {line}")
    for tid in sorted(res):
        if res[tid] not in ("ok", "skip"):
            print(f"  {res[tid]:6} {tid}")


def seen(outdir):
    res, _ = load(outdir)
    for tid in sorted(res):
        print(tid)


def compare(refdir, outdir, mtldir=None):
    """Every test that passed in REFDIR must pass in OUTDIR, except one
    that also does not pass in MTLDIR (the same MPI's pml cm / mtl ofi
    over libfabric's own tcp;ofi_rxm provider): a limit of the MPI's
    mtl ofi path, not of the provider under test; those are listed."""
    ref, _ = load(refdir)
    out, _ = load(outdir)
    mtl = load(mtldir)[0] if mtldir else {}
    bad, beyond = [], []
    for tid in sorted(ref):
        r, o = ref[tid], out.get(tid, "notrun")
        if (r == "ok" and o != "ok") or (r == "skip" and o not in ("ok", "skip")):
            if mtldir and mtl.get(tid, "notrun") not in ("ok", "skip"):
                beyond.append((o, mtl.get(tid, "notrun"), tid))
            else:
                bad.append((o, tid))
    passed = sum(1 for t in ref if ref[t] == "ok" and out.get(t) == "ok")
    want = sum(1 for t in ref if ref[t] == "ok")
    print(f"{passed} of the {want} tests that pass in {os.path.basename(refdir)} pass in "
          f"{os.path.basename(outdir)}; {len(bad)} do not")
    for o, tid in bad:
        print(f"  {o:6} {tid}")
    if beyond:
        print(f"{len(beyond)} more do not pass in {os.path.basename(mtldir)} either "
              "(the MPI's mtl ofi path with libfabric's tcp;ofi_rxm), not counted:")
        for o, m, tid in beyond:
            print(f"  {o:6} (rxm: {m}) {tid}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "seen":
        seen(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None))
    else:
        main()
