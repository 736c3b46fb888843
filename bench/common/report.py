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


def derived(w, records):
    """{id(record): (median_us, speedup over baseline, x baseline, vs best peer)}."""
    base = [median_us(r) for r in records if r["flavor"] == w.baseline and median_us(r)]
    base_us = base[0] if base else None
    out = {}
    for r in records:
        m = median_us(r)
        peers = [median_us(p) for p in records
                 if p["flavor"] in w.peers and p["threads"] == r["threads"] and median_us(p)]
        best_peer = min(peers) if peers else None
        out[id(r)] = (m,
                      base_us / m if m and base_us else None,
                      m / base_us if m and base_us else None,
                      m / best_peer if m and best_peer else None)
    return out


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def tables(workloads, records, runs, notes):
    """The text report: one table per workload, then the notes."""
    lines = []
    for w in workloads:
        head = ("flavor", "threads", "median ms", "spread", "speedup", f"x {w.baseline}", "vs peer",
                "RSS MiB", "status")
        recs = ordered(w, [r for r in records if r["workload"] == w.name])
        if not recs:
            continue
        if getattr(w, "own_table", False):
            lines += own_table(w, recs, runs)
            continue
        lines.append(f"\n{w.name} ({w.size_label.format(recs[0]['size'])}; median of {runs} run(s); "
                     f"speedup = {w.baseline} / this; x {w.baseline} = this / {w.baseline}; "
                     f"vs peer = this / best of {','.join(w.peers)} at the same threads)")
        d = derived(w, recs)
        rows = [head]
        for r in recs:
            m, speedup, x_base, vs_peer = d[id(r)]
            status = "ok" if r["status"] == "ok" else "FAIL: " + r["reason"]
            rows.append((r["flavor"], fmt(r["threads"], "d"), fmt(m and m / 1000, ",.2f"),
                         fmt(spread(r), ".0%"), fmt(speedup, ".2f"), fmt(x_base, ".2f"),
                         fmt(vs_peer, ".2f"), fmt(median_rss_mib(r), ".1f"), status))
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


def write_json(path, root, cxx, args, records):
    version = command_output([cxx, "--version"]) or ""
    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"nproc": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
                    "model": cpu_model(), "kernel": platform.release()},
        "compiler": {"path": cxx, "version": version.splitlines()[0] if version else "unknown"},
        "git": {"commit": command_output(["git", "rev-parse", "HEAD"], root) or "none",
                "dirty": bool(command_output(["git", "status", "--porcelain"], root))},
        "options": {"quick": args.quick, "sweep": args.sweep, "runs": args.runs,
                    "timeout_s": args.timeout, "build_dir": str(args.build_dir)},
        "env": {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "KMP_", "TBB_", "WEFT_"))},
        "results": records,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")


COLORS = {"seq": "#8c8c8c", "fj": "#1f6fb4", "tbb": "#e07b1a", "omp": "#3a9a4a"}


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
