"""bench/run's reports: one text table per workload, latest.json, one SVG per workload.

A record is one binary x flavor x thread count as run.py made it: status "ok" or
"FAIL" (with a reason), and its raw runs [{duration_us, max_rss_kib}]."""

import datetime
import json
import os
import platform
import statistics
import subprocess
from xml.sax.saxutils import escape


def median_us(rec):
    return statistics.median(r["duration_us"] for r in rec["runs"]) if rec["status"] == "ok" else None


def median_rss_mib(rec):
    return statistics.median(r["max_rss_kib"] for r in rec["runs"]) / 1024 if rec["status"] == "ok" else None


def spread(rec):
    """(max - min) / median of the runs, the noise this row carries."""
    d = [r["duration_us"] for r in rec["runs"]]
    return (max(d) - min(d)) / statistics.median(d) if rec["status"] == "ok" and d else None


def ordered(w, records):
    """The baseline first, then by thread count, flavors in the workload's order."""
    rank = {f: i for i, f in enumerate(w.flavors)}
    return sorted(records, key=lambda r: (r["flavor"] != w.baseline, r["threads"] or 0,
                                          rank.get(r["flavor"], 99)))


def paired(rec, others):
    """Per round, rec's median over the others' (their best, for several), when every
    record ran the same rounds (--rounds R > 1): the rows of a round ran back to back,
    so each round's ratio compares runs from the same minutes. None otherwise."""
    mine = rec.get("round_medians_us")
    theirs = [o.get("round_medians_us") for o in others]
    if not mine or len(mine) < 2 or not theirs or any(not t or len(t) != len(mine) for t in theirs):
        return None
    return [m / min(t[i] for t in theirs) for i, m in enumerate(mine)]


def derived(w, records):
    """{id(record): (median_us, speedup over baseline, x baseline, vs best peer)}.
    With rounds, the ratios are medians of the per-round ratios (see paired); else
    ratios of the pooled medians."""
    base = [r for r in records if r["flavor"] == w.baseline and median_us(r)]
    base_us = median_us(base[0]) if base else None
    out = {}
    for r in records:
        m = median_us(r)
        peers = [p for p in records if p["flavor"] in w.peers and p["threads"] == r["threads"] and median_us(p)]
        best_peer = min(median_us(p) for p in peers) if peers else None
        x_base = m / base_us if m and base_us else None
        vs_peer = m / best_peer if m and best_peer else None
        if m and base:
            x_base = statistics.median(paired(r, base[:1]) or [x_base])
        if m and peers:
            vs_peer = statistics.median(paired(r, peers) or [vs_peer])
        out[id(r)] = (m, 1 / x_base if x_base else None, x_base, vs_peer)
    return out


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def metric_median(rec, key):
    vals = rec.get("metrics", {}).get(key)
    return statistics.median(vals) if rec["status"] == "ok" and vals else None


def metric_table(w, recs, runs):
    """A latency-style table: per row the median over the runs of each metric, and each
    metric as a ratio to the baseline flavor's at the same thread count."""
    lines = [f"\n{w.name} ({w.size_label.format(recs[0]['size'])}; median of {runs} run(s); "
             f"'/ {w.baseline}' = this / {w.baseline} at the same threads)"]
    head = ["flavor", "threads", "median ms"]
    for k in w.metrics:
        head += [k.split(".", 1)[1]] + ([f"/ {w.baseline}"] if not k.endswith("samples") else [])
    head += ["RSS MiB", "status"]
    rows = [tuple(head)]
    for r in recs:
        base = next((b for b in recs if b["flavor"] == w.baseline and b["threads"] == r["threads"]), None)
        m = median_us(r)
        row = [r["flavor"], fmt(r["threads"], "d"), fmt(m and m / 1000, ",.2f")]
        for k in w.metrics:
            v = metric_median(r, k)
            row.append(fmt(v, ",.0f"))
            if not k.endswith("samples"):
                b = metric_median(base, k) if base else None
                row.append(fmt(v / b if v is not None and b else None, ".3g"))
        row += [fmt(median_rss_mib(r), ".1f"), "ok" if r["status"] == "ok" else "FAIL: " + r["reason"]]
        rows.append(tuple(row))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(wd) for c, wd in zip(row[1:-1], widths[1:])]
        lines.append("  ".join(cells + [row[-1]]))
    return lines


def tables(workloads, records, runs, notes):
    """The text report: one table per workload, then the notes."""
    lines = []
    for w in workloads:
        if w.metrics:
            recs = sorted((r for r in records if r["workload"] == w.name),
                          key=lambda r: (r["threads"] or 0, r["flavor"] != w.baseline))
            if recs:
                lines += metric_table(w, recs, runs)
            continue
        head = ("flavor", "threads", "median ms", "spread", "speedup", f"x {w.baseline}", "vs peer",
                "RSS MiB", "status")
        recs = ordered(w, [r for r in records if r["workload"] == w.name])
        if not recs:
            continue
        # weft's flavors print their pool's steals and parks per run (bench/README.md).
        pool_rates = any(r.get("metrics", {}).get("pool.steals_per_s") for r in recs)
        if pool_rates:
            head = head[:-1] + ("steals/s", "parks/s", "status")
        if getattr(w, "own_table", False):
            lines += own_table(w, recs, runs)
            continue
        rounds = max((r.get("rounds", 1) for r in recs), default=1)
        lines.append(f"\n{w.name} ({w.size_label.format(recs[0]['size'])}; median of {runs} run(s); "
                     f"speedup = {w.baseline} / this; x {w.baseline} = this / {w.baseline}; "
                     f"vs peer = this / best of {','.join(w.peers)} at the same threads"
                     + (f"; ratios: median of the {rounds} rounds' own ratios" if rounds > 1 else "") + ")")
        d = derived(w, recs)
        rows = [head]
        for r in recs:
            m, speedup, x_base, vs_peer = d[id(r)]
            status = "ok" if r["status"] == "ok" else "FAIL: " + r["reason"]
            row = (r["flavor"], fmt(r["threads"], "d"), fmt(m and m / 1000, ",.2f"),
                   fmt(spread(r), ".0%"), fmt(speedup, ".2f"), fmt(x_base, ".2f"),
                   fmt(vs_peer, ".2f"), fmt(median_rss_mib(r), ".1f"))
            if pool_rates:
                row += (fmt(metric_median(r, "pool.steals_per_s"), ",.0f"),
                        fmt(metric_median(r, "pool.parks_per_s"), ",.0f"))
            rows.append(row + (status,))
        widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
        for row in rows:
            cells = [row[0].ljust(widths[0])] + [c.rjust(wd) for c, wd in zip(row[1:-1], widths[1:])]
            lines.append("  ".join(cells + [row[-1]]))
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def own_table(w, recs, runs):
    """A workload that prints its own table (`<name>: ...` lines): those lines per record."""
    out = [f"\n{w.name} ({w.size_label.format(recs[0]['size'])}; {runs} run(s); the binary's own table)"]
    for r in recs:
        out.append(f"threads {r['threads']}: " + ("ok" if r["status"] == "ok" else "FAIL: " + r["reason"]))
        prefix = w.name + ":"
        out += ["  " + line[len(prefix):].strip() for line in (r.get("stdout") or "").splitlines()
                if line.startswith(prefix)]
    return out


def command_output(cmd, cwd=None):
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=30)
        return out.stdout.strip() if out.returncode == 0 else None
    except OSError:
        return None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_json(path, root, cxx, args, records, build_info=None):
    version = command_output([cxx, "--version"]) or ""
    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"nproc": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
                    "model": cpu_model(), "kernel": platform.release()},
        "compiler": {"path": cxx, "version": version.splitlines()[0] if version else "unknown"},
        "build": build_info or {},
        "git": {"commit": command_output(["git", "rev-parse", "HEAD"], root) or "none",
                "dirty": bool(command_output(["git", "status", "--porcelain"], root))},
        "options": {"quick": args.quick, "sweep": args.sweep, "runs": args.runs, "rounds": args.rounds,
                    "timeout_s": args.timeout, "build_dir": str(args.build_dir)},
        "env": {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "KMP_", "TBB_", "WEFT_"))},
        "results": records,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")


def build_header(info, model):
    """The line above the tables that says what the binaries were built with and where
    they run, so that figures from two machines are compared knowingly."""
    if not info:
        return "build: unknown (no bench/build-info.txt in the build directory)"
    flags = " ".join(info.get("flags", "").split())
    return (f"build: {info.get('compiler', '?')}, {info.get('build_type', '?')}, flags {flags or '(none)'}, "
            f"architecture flags {info.get('arch_flags', '?')}; cpu: {model}")


def load_json(path):
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or "results" not in doc:
        raise SystemExit(f"bench/run: {path} is not a bench/run results file (no 'results')")
    return doc


REGRESSION = 1.05  # new / old median above this is flagged


def compare(old_doc, new_doc):
    """(text, number of regressions): new/old median duration per cell (workload,
    flavor, threads, size) present in both files; cells over REGRESSION are flagged.
    For workloads with metrics (latency), each metric's new/old ratio is shown too."""
    def key(r):
        return (r["workload"], r["flavor"], r["threads"], r["size"])
    old = {key(r): r for r in old_doc["results"]}
    lines = [f"\ncompare: new = {new_doc.get('git', {}).get('commit', '?')[:10]} "
             f"({new_doc.get('date', '?')}), old = {old_doc.get('git', {}).get('commit', '?')[:10]} "
             f"({old_doc.get('date', '?')}); ratio = new / old median, lower is better"]
    rows = [("workload", "flavor", "threads", "old ms", "new ms", "ratio", "metrics new/old", "")]
    regressions = 0
    for r in sorted(new_doc["results"], key=lambda r: (r["workload"], r["threads"] or 0, r["flavor"])):
        o = old.get(key(r))
        if o is None:
            continue
        mo, mn = median_us(o), median_us(r)
        ratio = mn / mo if mo and mn else None
        metrics = []
        for k in sorted(r.get("metrics", {})):
            a, b = metric_median(o, k), metric_median(r, k)
            if a and b and not k.endswith("samples"):
                metrics.append(f"{k.split('.', 1)[1]} {b / a:.2f}")
        flag = ""
        if ratio is None:
            flag = "FAIL in " + ("new" if mn is None else "old")
        elif ratio > REGRESSION:
            flag = "REGRESSION"
            regressions += 1
        rows.append((r["workload"], r["flavor"], fmt(r["threads"], "d"), fmt(mo and mo / 1000, ",.2f"),
                     fmt(mn and mn / 1000, ",.2f"), fmt(ratio, ".3f"), ", ".join(metrics), flag))
    if len(rows) == 1:
        return "\n".join(lines + ["no cell (workload, flavor, threads, size) is in both files"]), 0
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append("  ".join(c.ljust(wd) if i < 2 or i >= 6 else c.rjust(wd)
                               for i, (c, wd) in enumerate(zip(row, widths))).rstrip())
    lines.append(f"{regressions} regression(s) over {REGRESSION - 1:.0%}")
    return "\n".join(lines), regressions


COLORS = {"seq": "#8c8c8c", "fj": "#1f6fb4", "gs": "#7b3fa0", "tbb": "#e07b1a", "omp": "#3a9a4a"}


def write_svg(path, w, records, runs):
    """A hand-written horizontal bar chart: one bar per flavor x threads, median duration."""
    recs = ordered(w, records)
    d = derived(w, recs)
    row_h, left, bar_w, top = 24, 120, 430, 58
    width, height = left + bar_w + 190, top + row_h * max(1, len(recs)) + 24
    longest = max((d[id(r)][0] or 0 for r in recs), default=0) or 1
    size = w.size_label.format(recs[0]["size"]) if recs else ""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="22" font-size="16" font-weight="bold">{escape(w.name)} ({escape(size)})</text>',
           f'<text x="10" y="42" fill="#555">median of {runs} run(s), ms, shorter is better; '
           f'label: ms (x {escape(w.baseline)})</text>']
    prev_threads = None
    for i, r in enumerate(recs):
        y = top + i * row_h
        if prev_threads is not None and r["threads"] != prev_threads:
            out.append(f'<line x1="10" x2="{width - 10}" y1="{y - 2}" y2="{y - 2}" stroke="#ddd"/>')
        prev_threads = r["threads"]
        label = f'{r["flavor"]}  T={r["threads"]}'
        out.append(f'<text x="10" y="{y + 15}">{escape(label)}</text>')
        m, _, x_base, _ = d[id(r)]
        if m is None:
            out.append(f'<text x="{left}" y="{y + 15}" fill="#c00" font-weight="bold">FAIL: '
                       f'{escape(r["reason"][:60])}</text>')
            continue
        length = max(1.0, bar_w * m / longest)
        color = COLORS.get(r["flavor"], "#7a5195")
        out.append(f'<rect x="{left}" y="{y + 3}" width="{length:.1f}" height="{row_h - 8}" fill="{color}"/>')
        text = f"{m / 1000:,.2f} ms" + (f" ({x_base:.2f}x)" if x_base else "")
        out.append(f'<text x="{left + length + 6:.1f}" y="{y + 15}">{escape(text)}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def write_sweep_svg(path, w, records, runs):
    """The --sweep chart: speedup over the baseline (y) against threads (x), one line
    per flavor, with the ideal (linear) speedup dashed. Falls back to bars when there
    is no baseline time to divide by."""
    d = derived(w, records)
    lines = {}
    for r in records:
        speedup = d[id(r)][1]
        if r["flavor"] != w.baseline and r["threads"] and speedup:
            lines.setdefault(r["flavor"], []).append((r["threads"], speedup))
    if not lines:
        write_svg(path, w, records, runs)
        return
    max_t = max(t for pts in lines.values() for t, _ in pts)
    max_s = max(max(s for pts in lines.values() for _, s in pts), float(max_t), 1.0)
    left, top, plot_w, plot_h = 60, 50, 460, 300
    width, height = left + plot_w + 150, top + plot_h + 50

    def x(t):
        return left + (t - 1) / max(1, max_t - 1) * plot_w

    def y(s):
        return top + plot_h - s / max_s * plot_h

    size = w.size_label.format(records[0]["size"]) if records else ""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="22" font-size="16" font-weight="bold">{escape(w.name)} ({escape(size)}): '
           f'speedup over {escape(w.baseline)}</text>',
           f'<text x="10" y="40" fill="#555">median of {runs} run(s) per point; dashed: linear speedup</text>',
           f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#333"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#333"/>']
    for t in range(1, max_t + 1):
        out.append(f'<text x="{x(t):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{t}</text>')
    out.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h + 34}" text-anchor="middle">threads</text>')
    step = max(1, round(max_s / 8))
    s_tick = 0
    while s_tick <= max_s:
        out.append(f'<text x="{left - 6}" y="{y(s_tick) + 4:.1f}" text-anchor="end">{s_tick}</text>')
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(s_tick):.1f}" y2="{y(s_tick):.1f}" '
                   f'stroke="#eee"/>')
        s_tick += step
    out.append(f'<line x1="{x(1):.1f}" y1="{y(1):.1f}" x2="{x(max_t):.1f}" y2="{y(max_t):.1f}" '
               f'stroke="#999" stroke-dasharray="4 4"/>')
    for i, (flavor, pts) in enumerate(sorted(lines.items())):
        pts.sort()
        color = COLORS.get(flavor, "#7a5195")
        path_d = " ".join(f"{'M' if j == 0 else 'L'}{x(t):.1f},{y(s):.1f}" for j, (t, s) in enumerate(pts))
        out.append(f'<path d="{path_d}" fill="none" stroke="{color}" stroke-width="2"/>')
        for t, s in pts:
            out.append(f'<circle cx="{x(t):.1f}" cy="{y(s):.1f}" r="3" fill="{color}"/>')
        out.append(f'<rect x="{left + plot_w + 20}" y="{top + i * 20}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{left + plot_w + 38}" y="{top + i * 20 + 11}">{escape(flavor)}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")
