#!/usr/bin/env python3
"""bench/run's engine: build Release, run every workload x flavor x thread
count, check every answer, print one table per workload, and write
bench/results/latest.json and bench/results/<workload>.svg (bench/README.md).

A workload is one line of WORKLOADS; report.py turns the records into text,
JSON and SVG. Exits 1 when any run failed (wrong answer, crash, time-out)."""

import argparse
import dataclasses
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import report

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str                      # also the binary's name
    flavors: tuple                 # in table order; a binary may lack some (fj without weft)
    size: int                      # the default size (bench/README.md)
    quick_size: int                # --quick: the whole run stays under a minute
    size_label: str = "size={:,}"  # how tables and charts name a size
    baseline: str = "seq"          # speedups are over this flavor, run at 1 thread only
    peers: tuple = ("tbb", "omp")  # "vs peer" is over the best of these
    # Extra per-run figures the binary prints as `<group>: key=value ...` lines (one
    # line per run, the warm-up's first), shown as table columns "group.key" (median
    # over the runs). Set for latency-style workloads.
    metrics: tuple = ()
    single_thread: bool = False    # the binary ignores --threads: run every flavor at 1 only
    baseline_1t_only: bool = True  # a sequential baseline runs at 1 thread only
    one_thread: tuple = ()         # flavors that ignore --threads (single-thread executors)
    own_table: bool = False        # the binary prints its own `<name>:` table lines (latency)
    args: tuple = ()               # more arguments for the binary
    quick_args: tuple = ()         # ... and under --quick instead
    # The answer counts work done in a fixed time (http: requests served), so it differs
    # between rounds by nature; the binary checks it against its client itself.
    timed_answer: bool = False


COMPUTE = ("seq", "fj", "gs", "tbb", "omp")
WORKLOADS = [
    Workload("fib", COMPUTE, 39, 30, "n={}"),
    Workload("skynet", COMPUTE, 100_000_000, 1_000_000, "{:,} leaves"),
    Workload("nqueens", COMPUTE, 14, 10, "n={}"),
    Workload("matmul", COMPUTE, 2048, 256, "N={}"),
    Workload("priority", ("levels1", "levels2"), 39, 30, "low-priority fib({}), a probe every 100 us",
             baseline="levels1", peers=(), metrics=("latency.p50_ns", "latency.p99_ns", "latency.samples"),
             baseline_1t_only=False),
    Workload("io_socket_st", ("asio", "weft-asio", "weft-uring"), 100_000, 10_000, "{:,} requests, 20 connections",
             baseline="asio", peers=("asio",), single_thread=True),
    Workload("io_udp_st", ("asio", "weft-uring"), 100_000, 10_000, "{:,} datagrams of 64 bytes, 20 sockets",
             baseline="asio", peers=("asio",), single_thread=True),
    Workload("io_file", ("seq", "weft-uring", "weft-uring-16", "asio", "asio-16"), 200_000, 20_000,
             "{:,} random 4 KiB reads of a cached 64 MiB file", baseline="seq", peers=("asio", "asio-16"),
             single_thread=True),
    Workload("io_file_seq", ("seq", "weft", "weft-uring", "asio"), 4096, 256,
             "{:,} MiB read in 64 KiB blocks, 32 in flight, from a cached file of up to 1 GiB", baseline="seq",
             peers=("asio",), baseline_1t_only=False),
    # No sequential flavor: speedups are over weft's own mt at 1 thread; Asio is the peer.
    Workload("channel", ("mt", "mt-bounded", "st", "st-bounded", "asio"), 10_000_000, 100_000, "{:,} elements",
             baseline="mt", peers=("asio",), baseline_1t_only=False, one_thread=("st", "st-bounded")),
    Workload("fiber_switch", ("task", "fiber", "task-queue", "fiber-queue", "fib-fj", "fib-fiber"), 30, 20,
             "n={} (switch flavors: n x 100,000 round trips; fib flavors: fib(n))", baseline="task", peers=("fib-fj",)),
    Workload("latency", ("fj",), 100_000, 2_000, "{:,} samples", baseline="none", peers=(), own_table=True),
    # Size = wrk's connections; requests/s and latency come as metrics, each over nginx's.
    Workload("http", ("nginx", "weft", "weft-uring", "weft-asio", "asio"), 256, 64,
             "{} connections, wrk -t1 on the same machine, 5 s a run (--quick: 1 s)", baseline="nginx",
             peers=("nginx",), metrics=("http.rps", "http.p50_us", "http.p99_us", "http.cpu_us"), baseline_1t_only=False,
             args=("--seconds", "5"), quick_args=("--seconds", "1"), timed_answer=True),
]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench/run", description="Build Release, run every benchmark "
                                "(binary x flavor x thread count), check every answer, report (bench/README.md).")
    p.add_argument("--quick", action="store_true", help="small sizes, the whole run under a minute")
    p.add_argument("--sweep", action="store_true", help="every thread count 1..nproc (default: 1 and nproc)")
    p.add_argument("--threads", metavar="T1,T2,...",
                   help="these thread counts instead (above nproc: oversubscribed; bench/sweep uses it)")
    p.add_argument("--runs", type=int, default=3, help="timed runs per binary x flavor x threads (default 3)")
    p.add_argument("--rounds", type=int, default=1,
                   help="invoke every binary x flavor x threads of a workload this many times, in turn "
                        "(round 1 of every row, then round 2, ...), and pool the runs: on a machine "
                        "whose speed drifts, every row then samples the same stretch of time; the "
                        "table's ratios are then medians of each round's own ratios (default 1)")
    p.add_argument("--only", action="append", choices=[w.name for w in WORKLOADS], metavar="WORKLOAD",
                   help="run only this workload (repeatable): " + ", ".join(w.name for w in WORKLOADS))
    p.add_argument("--flavor", action="append", metavar="FLAVOR",
                   help="run only this flavor (repeatable; the baseline always runs, for the ratios)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per binary invocation (default 60 with --quick, else 1200)")
    p.add_argument("--build-dir", type=Path, default=ROOT / "build" / "bench-release",
                   help="CMake build directory (default build/bench-release)")
    p.add_argument("--no-build", action="store_true", help="use the binaries already in --build-dir")
    p.add_argument("--results", type=Path, default=ROOT / "bench" / "results",
                   help="where latest.json and the SVG charts go (default bench/results)")
    p.add_argument("--compare", type=Path, metavar="OLD.json",
                   help="after the run, print new/old median per cell and flag regressions over 5%%")
    p.add_argument("--against", type=Path, metavar="NEW.json",
                   help="with --compare: compare this results file instead of running anything")
    args = p.parse_args(argv)
    if args.against and not args.compare:
        p.error("--against needs --compare OLD.json")
    for f in (args.compare, args.against):
        if f and not f.is_file():
            p.error(f"no such results file: {f}")
    if args.threads is not None:
        try:
            args.threads = sorted({int(t) for t in args.threads.split(",")})
        except ValueError:
            p.error(f"--threads takes a comma-separated list of counts (got {args.threads!r})")
        if not args.threads or args.threads[0] < 1:
            p.error("--threads: every count must be >= 1")
    if args.runs < 1:
        p.error("--runs must be >= 1")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if args.timeout is None:
        args.timeout = 60.0 if args.quick else 1200.0
    return args


def cmake_cached_compiler(build_dir):
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        return None
    m = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.*)$", cache.read_text(), re.M)
    return m.group(1).strip() if m else None


def build(args, workloads):
    """Configures build_dir (from scratch when $CXX changed) and builds the bench targets."""
    cxx = os.environ.get("CXX") or "clang++-19"
    cxx_path = shutil.which(cxx)
    if cxx_path is None:
        sys.exit(f"bench/run: compiler '{cxx}' not found (set CXX)")
    cached = cmake_cached_compiler(args.build_dir)
    if cached and os.path.realpath(cached) != os.path.realpath(cxx_path):
        print(f"bench/run: compiler changed ({cached} -> {cxx_path}), reconfiguring", file=sys.stderr)
        (args.build_dir / "CMakeCache.txt").unlink()
        shutil.rmtree(args.build_dir / "CMakeFiles", ignore_errors=True)
    # Configuring every time is cheap and keeps the options right.
    run_or_exit(["cmake", "-S", str(ROOT), "-B", str(args.build_dir), "-G", "Ninja",
                 "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_CXX_COMPILER={cxx_path}",
                 "-DWEFT_BUILD_TESTS=OFF", "-DWEFT_BUILD_BENCH=ON", "-DWEFT_WERROR=OFF"], "configure")
    targets = [f"weft_bench_{w.name}" for w in workloads]
    run_or_exit(["cmake", "--build", str(args.build_dir), "--target", *targets], "build")
    return cxx_path


def run_or_exit(cmd, what):
    """Runs a set-up step quietly; on failure shows its output and exits."""
    print(f"bench/run: {what}: " + " ".join(cmd), file=sys.stderr)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write("\n".join((proc.stdout + proc.stderr).splitlines()[-80:]) + "\n")
        sys.exit(f"bench/run: {what} failed")


def read_build_info(args):
    """{key: value} of the build-info file CMake writes beside the binaries (bench/CMakeLists.txt)."""
    path = args.build_dir / "bench" / "build-info.txt"
    if not path.is_file():
        return {}
    info = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            info[key.strip()] = value.strip()
    return info


def binary_path(args, workload):
    return args.build_dir / "bench" / workload.name


def built_flavors(path):
    """The flavors the binary has (`--list`), or None when it is missing or broken."""
    if not path.exists():
        return None
    try:
        out = subprocess.run([str(path), "--list"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.split() if out.returncode == 0 else None


def thread_counts(args):
    if args.threads:
        return args.threads
    nproc = len(os.sched_getaffinity(0))
    return list(range(1, nproc + 1)) if args.sweep else sorted({1, nproc})


def plan(args, workloads):
    """[(workload, flavor, threads)] to run, and notes on what is skipped."""
    jobs, notes = [], []
    for w in workloads:
        have = built_flavors(binary_path(args, w))
        if have is None:
            jobs += [(w, f, None) for f in w.flavors[:1]]  # reported as one FAIL row
            continue
        for f in w.flavors:
            if args.flavor and f not in args.flavor and f != w.baseline:
                continue
            if f not in have:
                notes.append(f"{w.name}: flavor {f} not built into {binary_path(args, w)}")
                continue
            counts = ([1] if w.single_thread or f in w.one_thread or (f == w.baseline and w.baseline_1t_only)
                      else thread_counts(args))
            jobs += [(w, f, t) for t in counts]
    return jobs, notes


DURATION = re.compile(r"^\s*duration:\s*(\d+)\s*us\s*$", re.M)
MAX_RSS = re.compile(r"^\s*max_rss:\s*(\d+)\s*KiB\s*$", re.M)
OUTPUT = re.compile(r"^output:\s*(\S+)\s*$", re.M)
FAIL = re.compile(r"^FAIL:\s*(.*)$", re.M)
METRIC = re.compile(r"^([a-z][a-z0-9_]*):((?:\s+[a-z][a-z0-9_]*=-?[0-9.]+)+)\s*$", re.M)


def parse_metrics(stdout, runs):
    """{"group.key": [value per timed run]} from `group: key=value ...` lines; the
    last `runs` lines of each group are the timed runs (the first is the warm-up)."""
    per_group = {}
    for m in METRIC.finditer(stdout):
        per_group.setdefault(m.group(1), []).append(
            {k: float(v) for k, v in (kv.split("=") for kv in m.group(2).split())})
    out = {}
    for group, lines in per_group.items():
        for line in lines[-runs:]:
            for k, v in line.items():
                out.setdefault(f"{group}.{k}", []).append(v)
    return out


def launch(cmd, timeout):
    """Runs cmd; returns (exit code, stdout, stderr). Raises TimeoutExpired after
    killing it.

    The binary is started by a shell that forks it, not by this process
    directly: Linux carries a process's peak RSS across exec, so a binary
    exec'd straight from Python would report Python's peak as its max_rss.
    A signal that kills the binary comes back as the shell's 128 + signal."""
    proc = subprocess.Popen(["sh", "-c", '"$@"; exit $?', "sh", *cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return proc.returncode, stdout, stderr


def signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def run_one(args, w, flavor, threads):
    """Runs one binary x flavor x thread count; returns its record."""
    size = w.quick_size if args.quick else w.size
    rec = {"workload": w.name, "flavor": flavor, "threads": threads, "size": size,
           "status": "FAIL", "reason": "", "runs": [], "output": None, "exit_code": None}
    path = binary_path(args, w)
    if threads is None:
        rec["reason"] = f"binary missing or broken: {path}"
        return rec
    cmd = [str(path), "--flavor", flavor, "--threads", str(threads), "--size", str(size),
           "--runs", str(args.runs), *(w.quick_args if args.quick else w.args)]
    rec["command"] = " ".join(cmd)
    start = time.monotonic()
    try:
        code, stdout, stderr = launch(cmd, args.timeout)
    except subprocess.TimeoutExpired:
        rec["reason"] = f"timed out after {args.timeout:.0f} s"
        return rec
    finally:
        rec["wall_s"] = round(time.monotonic() - start, 3)
    rec["exit_code"] = code
    rec["stdout"], rec["stderr"] = stdout, stderr[-2000:]
    durations = [int(x) for x in DURATION.findall(stdout)]
    rss = [int(x) for x in MAX_RSS.findall(stdout)]
    out = OUTPUT.search(stdout)
    rec["runs"] = [{"duration_us": d, "max_rss_kib": r} for d, r in zip(durations, rss)]
    rec["output"] = out.group(1) if out else None
    rec["metrics"] = parse_metrics(stdout, args.runs)
    if m := FAIL.search(stdout):
        rec["reason"] = m.group(1)
    elif code > 128:
        rec["reason"] = f"killed by {signal_name(code - 128)}"
    elif code != 0:
        last = (stderr.strip().splitlines() or ["no message"])[-1]
        rec["reason"] = f"exit code {code}: {last}"
    elif len(rec["runs"]) != args.runs or len(durations) != len(rss) or out is None:
        rec["reason"] = "output not in the report format of bench/README.md"
    else:
        rec["status"] = "ok"
    return rec


def merge_rounds(recs, timed_answer=False):
    """One record from the rounds of one binary x flavor x threads: the runs and metrics
    pooled; the first failed round's record if any failed; FAIL if the answers differ
    (unless `timed_answer`: see Workload)."""
    bad = next((r for r in recs if r["status"] != "ok"), None)
    if len(recs) == 1 or bad is not None:
        return bad or recs[0]
    rec = dict(recs[-1])  # stdout (the binary's own table, if any): the last round's
    rec["runs"] = [run for r in recs for run in r["runs"]]
    rec["metrics"] = {}
    for r in recs:
        for key, values in r.get("metrics", {}).items():
            rec["metrics"].setdefault(key, []).extend(values)
    rec["wall_s"] = round(sum(r.get("wall_s", 0) for r in recs), 3)
    rec["rounds"] = len(recs)
    # Each round's own median: report.py pairs it with the baseline's in the same round.
    rec["round_medians_us"] = [statistics.median(run["duration_us"] for run in r["runs"]) for r in recs]
    if not timed_answer and len({r["output"] for r in recs}) > 1:
        rec["status"] = "FAIL"
        rec["reason"] = "the answer differs between rounds: " + ", ".join(sorted({str(r["output"]) for r in recs}))
    return rec


class Progress:
    """One status line on stderr: what runs now, n of m, elapsed."""

    def __init__(self, total):
        self.total, self.start = total, time.monotonic()
        self.tty = sys.stderr.isatty()

    def show(self, n, text):
        line = f"[{n:>{len(str(self.total))}}/{self.total}] {text}  ({time.monotonic() - self.start:.1f} s elapsed)"
        if self.tty:
            sys.stderr.write("\r\033[K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def done(self):
        if self.tty:
            sys.stderr.write("\r\033[K")
        sys.stderr.write(f"bench/run: {self.total} invocations in {time.monotonic() - self.start:.1f} s\n")


def main(argv):
    args = parse_args(argv)
    if args.against:
        text, regressions = report.compare(report.load_json(args.compare), report.load_json(args.against))
        print(text)
        return 1 if regressions else 0
    workloads = [w for w in WORKLOADS if not args.only or w.name in args.only]
    cxx = None if args.no_build else build(args, workloads)
    cxx = cxx or cmake_cached_compiler(args.build_dir) or os.environ.get("CXX") or "clang++-19"

    jobs, notes = plan(args, workloads)
    progress = Progress(len(jobs) * args.rounds)
    records, n = [], 0
    for w in workloads:  # the rounds of one workload's rows alternate (see --rounds)
        mine = [job for job in jobs if job[0] is w]
        rounds = [[] for _ in mine]
        for r in range(args.rounds):
            for i, (_, flavor, threads) in enumerate(mine):
                n += 1
                progress.show(n, f"{w.name} --flavor {flavor} --threads {threads} "
                                 f"--size {w.quick_size if args.quick else w.size} ({args.runs} runs"
                                 + (f", round {r + 1} of {args.rounds})" if args.rounds > 1 else ")"))
                rounds[i].append(run_one(args, w, flavor, threads))
        records += [merge_rounds(recs, w.timed_answer) for recs in rounds]
    progress.done()

    info = read_build_info(args)
    print(report.build_header(info, report.cpu_model()))
    print()
    print(report.tables(workloads, records, args.runs * args.rounds, notes))
    args.results.mkdir(parents=True, exist_ok=True)
    report.write_json(args.results / "latest.json", ROOT, cxx, args, records, info)
    for w in workloads:
        writer = report.write_sweep_svg if args.sweep and not w.metrics else report.write_svg
        writer(args.results / f"{w.name}.svg", w, [r for r in records if r["workload"] == w.name],
                         args.runs * args.rounds)
    print(f"results: {args.results / 'latest.json'} and {len(workloads)} SVG chart(s)")
    regressions = 0
    if args.compare:
        text, regressions = report.compare(report.load_json(args.compare),
                                           report.load_json(args.results / "latest.json"))
        print(text)
    failed = [r for r in records if r["status"] != "ok"]
    if regressions:
        print(f"bench/run: {regressions} cell(s) regressed by more than 5% against {args.compare}",
              file=sys.stderr)
    if failed:
        print(f"bench/run: {len(failed)} run(s) FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
