#!/usr/bin/env python3
"""Model-level speed, three engines on the same GGUF files: llama.cpp, qrepack-candle and stock
candle-transformers `quantized_llama` (the `bench` example of crates/qrepack-candle). Prints a
markdown table.

    ../shared/llamacpp/build.sh                  # once: llama.cpp's own llama-bench (engine llamabench)
    scripts/llama_peer/build.sh                  # or: $WORK/bin/llama_speed (engine llama, WORK=/tmp/llama-peer)
    scripts/model_speed.py [MODEL.gguf ...]      # default: /tmp/smol/SmolLM2-135M-Instruct.{q4_0,q4_K}.gguf
    scripts/model_speed.py --synth llama3.2-1b:q4_0 --synth llama3-8b:q4_k_m --engines llamacpp,qrepack

Options: --threads 2 --prompt 512 --gen 128 --runs 3 --wait-quiet 0.5 --wait-max 1200
         --engines llamacpp,qrepack,stock --poll 50 --llama PATH (default $WORK/bin/llama_speed)
         --llama-bench PATH (default ${TMPDIR:-/tmp}/llamacpp/src/llama.cpp/build/bin/llama-bench)
         --synth PRESET:MIX (repeatable) --no-build
         --json FILE (the runs, the machine and the commit, for --plot later)
         --plot FILE.svg (a bar chart: tokens/s per model and engine, one panel per test)
         --from-json FILE (no measuring: the table and --plot from a saved --json)

llama.cpp engines: `llamabench` runs llama.cpp's own llama-bench (`-p P -n G -d 0,P -t T
-fa 0,1 -r 1 -o json`; per test the best of the flash-attention off/on variants); `llama` runs
scripts/llama_peer (the llama-bench method on the peer's ggml). `llamacpp` (in the default
--engines) is llamabench when its binary exists, else llama.

--synth PRESET:MIX adds a synthetic model (`qrepack synth`: a real model's tensor names, shapes,
types and metadata, random weights) written to ${TMPDIR:-/tmp}/qrepack-synth/PRESET.MIX.gguf
unless it is already there; presets tiny, tiny-qwen3moe, llama3.2-1b, qwen2.5-1.5b,
qwen3-30b-a3b-6l, llama3-8b; mixes q4_0,
q4_k_m. Without MODEL arguments, only the --synth models are measured.

Each run is one process per engine, the engines alternating run by run (llama.cpp, qrepack-candle,
stock candle, llama.cpp, ...); every process does one untimed warm-up pass and one timed pass,
the KV cache cleared in between. The table gives the best of the runs (the machine may be
shared) and the median in brackets: "pp" is the P-token prompt as one batch (llama.cpp pp512);
"tg d0" is G single-token steps from an empty cache (llama-bench's tg128, `bench --tg-empty`);
"tg dP" is G steps after the P-token prompt (positions P..P+G-1: llama-bench's tg128 at -d 512,
what the candle bench times by default). An engine that fails on a model (stock candle cannot
run qwen2) is reported and left out for that model.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODELS = [f"/tmp/smol/SmolLM2-135M-Instruct.{q}.gguf" for q in ("q4_0", "q4_K")]
TARGETS = {  # the model-level goals: qrepack-candle / peer
    ("prompt", "candle"): 2.0,
    ("prompt", "llama"): 1.3,
    ("tg", "llama"): 1.0,
    ("gen", "candle"): 1.2,
    ("gen", "llama"): 1.2,
}
# the larger models (1B to 8B): prompt >= 1.5x llama.cpp, generation at least its speed
LARGE_TARGETS = {("prompt", "llama"): 1.5, ("tg", "llama"): 1.0, ("gen", "llama"): 1.0}


def target(model, what, peer):
    small = "135M" in model or "tiny" in os.path.basename(model)
    return (TARGETS if small else {**TARGETS, **LARGE_TARGETS}).get((what, peer))


COLORS = {"qrepack-candle": "#1f77b4", "llama.cpp": "#d62728", "llama.cpp (peer)": "#ff7f0e",
          "stock candle": "#7f7f7f"}


def short_name(model):
    return os.path.basename(model).replace("SmolLM2-135M-Instruct.", "SmolLM2-135M ").replace(".gguf", "")


def svg_bars(res, title, prompt, gen):
    """A grouped bar chart: one panel per test (pp, tg d0, tg dP), one group of bars per model,
    one bar per engine (the best run), its value written above it. Each group has its own scale
    (its fastest engine's bar is full height), so that a 135M model and an 8B one share a
    panel."""
    tests = [("prompt", f"pp{prompt}"), ("tg", f"tg{gen} d0"), ("gen", f"tg{gen} d{prompt}")]
    tests = [t for t in tests if any(r[e][t[0]] for r in res.values() for e in r)]
    engines = []
    for r in res.values():
        engines += [e for e in r if e not in engines]
    models = list(res)
    panel_w, panel_h, top, left, gap = 300, 300, 60, 50, 40
    w = left + len(tests) * (panel_w + gap) + 10
    h = top + panel_h + 60 + 20 * len(models)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           f'font-family="sans-serif" font-size="11">', f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="14">{esc(title)}</text>']
    for e_i, e in enumerate(engines):
        x = left + e_i * 150
        out.append(f'<rect x="{x}" y="34" width="12" height="12" fill="{COLORS.get(e, "#555")}"/>'
                   f'<text x="{x + 16}" y="44">{esc(e)}</text>')
    group_w = panel_w / max(1, len(models))
    bar_w = group_w * 0.8 / max(1, len(engines))
    for t_i, (key, label) in enumerate(tests):
        x0 = left + t_i * (panel_w + gap)
        out.append(f'<text x="{x0 + panel_w / 2}" y="{top + panel_h + 18}" text-anchor="middle" '
                   f'font-size="13">{esc(label)} (tokens/s)</text>')
        out.append(f'<line x1="{x0}" y1="{top + panel_h}" x2="{x0 + panel_w}" y2="{top + panel_h}" stroke="black"/>')
        for m_i, m in enumerate(models):
            gx = x0 + m_i * group_w + group_w * 0.1
            vmax = max([max(v[key]) for v in res[m].values() if v[key]] + [1e-9]) * 1.15
            for e_i, e in enumerate(engines):
                v = res[m].get(e, {}).get(key)
                if not v:
                    continue
                best = max(v)
                bh = best / vmax * panel_h
                x = gx + e_i * bar_w
                out.append(f'<rect x="{x:.1f}" y="{top + panel_h - bh:.1f}" width="{bar_w * 0.9:.1f}" '
                           f'height="{bh:.1f}" fill="{COLORS.get(e, "#555")}"/>')
                out.append(f'<text x="{x + bar_w * 0.45:.1f}" y="{top + panel_h - bh - 3:.1f}" '
                           f'text-anchor="middle" font-size="9">{best:.{1 if best < 20 else 0}f}</text>')
            out.append(f'<text x="{gx + group_w * 0.4:.1f}" y="{top + panel_h + 34}" text-anchor="middle" '
                       f'font-size="10">{m_i + 1}</text>')
    for m_i, m in enumerate(models):
        out.append(f'<text x="{left}" y="{top + panel_h + 56 + 20 * m_i}">{m_i + 1}: {esc(short_name(m))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def esc(t):
    return t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def load1():
    return os.getloadavg()[0]


def wait_quiet(limit, max_s):
    t0 = time.time()
    while load1() >= limit and time.time() - t0 < max_s:
        print(f"# load {load1():.2f} >= {limit}: waiting", file=sys.stderr, flush=True)
        time.sleep(30)
    quiet = load1() < limit
    print(f"# load {load1():.2f} at start ({'quiet' if quiet else 'NOT quiet, measuring anyway'})",
          file=sys.stderr, flush=True)
    return quiet


class EngineError(Exception):
    pass


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise EngineError(f"failed: {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout, p.stderr


def default_llama_bench():
    work = os.path.join(os.environ.get("TMPDIR", "/tmp"), "llamacpp")
    return os.path.join(work, "src", "llama.cpp", "build", "bin", "llama-bench")


def llamabench_once(a, model):
    """llama-bench's pp P, tg G at depth 0 and tg G at depth P, each the best of -fa 0 and 1."""
    out, _ = run([a.llama_bench, "-m", model, "-p", str(a.prompt), "-n", str(a.gen),
                  "-d", f"0,{a.prompt}", "-t", str(a.threads), "-fa", "0,1", "-r", "1", "-o", "json"])
    best = {}
    for t in json.loads(out):
        if t["n_prompt"] == a.prompt and t["n_gen"] == 0 and t["n_depth"] == 0:
            key = "prompt"
        elif t["n_prompt"] == 0 and t["n_gen"] == a.gen and t["n_depth"] == 0:
            key = "tg"
        elif t["n_prompt"] == 0 and t["n_gen"] == a.gen and t["n_depth"] == a.prompt:
            key = "gen"
        else:
            continue  # pp at depth P: not in the table
        best[key] = max(best.get(key, 0.0), float(t["avg_ts"]))
    if set(best) != {"prompt", "gen", "tg"}:
        raise EngineError(f"llama-bench output lacks tests: got {sorted(best)}\n{out[:2000]}")
    return best


def synth_model(a, spec):
    """The path of the synthetic model PRESET:MIX, written with `qrepack synth` if missing."""
    preset, _, mix = spec.partition(":")
    mix = mix or "q4_0"
    d = os.path.join(os.environ.get("TMPDIR", "/tmp"), "qrepack-synth")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"{preset}.{mix}.gguf")
    if not os.path.exists(path):
        print(f"# writing {path}", file=sys.stderr, flush=True)
        subprocess.run([a.qrepack, "synth", "--preset", preset, "--mix", mix, "-o", path], check=True)
    return path


def llama_once(a, model):
    out, _ = run([a.llama, model, "-t", str(a.threads), "-p", str(a.prompt), "-n", str(a.gen),
                  "-r", "1", "--poll", str(a.poll), "--json"])
    j = json.loads(out.strip().splitlines()[-1])
    return {"prompt": j["pp"], "gen": j["tg_depth"], "tg": j["tg"]}


def candle_once(a, model, who):
    # --reps 2: rep 0 is the warm-up, rep 1 the timed pass
    _, err = run([a.bench, model, "--threads", str(a.threads), "--prompt", str(a.prompt),
                  "--gen", str(a.gen), "--reps", "2", "--only", who, "--tg-empty"])
    tag = "qrepack-candle" if who == "qrepack" else "stock candle"
    m = re.findall(r"rep 1 " + re.escape(tag) + r":\s+prompt ([0-9.]+) s, generation ([0-9.]+) s, "
                   r"empty-cache generation ([0-9.]+) s", err)
    if not m:
        raise EngineError(f"cannot parse bench output:\n{err[-2000:]}")
    p, g, e = map(float, m[-1])
    return {"prompt": a.prompt / p, "gen": a.gen / g, "tg": a.gen / e}


def fmt(v):
    return f"{max(v):.1f} ({statistics.median(v):.1f})" if v else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--wait-quiet", type=float, default=0.5, help="wait for a 1-min load below this (0: don't)")
    ap.add_argument("--wait-max", type=float, default=1200)
    ap.add_argument("--llama", default=os.path.join(os.environ.get("WORK", "/tmp/llama-peer"), "bin", "llama_speed"))
    ap.add_argument("--poll", type=int, default=50, help="llama.cpp threadpool poll level (llama-bench: 50)")
    ap.add_argument("--llama-bench", default=default_llama_bench(), help="llama.cpp's llama-bench")
    ap.add_argument("--engines", default="llamacpp,qrepack,stock",
                    help="comma-separated subset of llamacpp (llamabench if built, else llama), llamabench, "
                         "llama, qrepack, stock")
    ap.add_argument("--synth", action="append", default=[], metavar="PRESET:MIX",
                    help="a synthetic model written by `qrepack synth` (repeatable)")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="write the runs, the machine and the commit as JSON")
    ap.add_argument("--plot", metavar="FILE.svg", help="a bar chart of the best runs")
    ap.add_argument("--from-json", metavar="FILE", help="no measuring: report and plot a saved --json")
    a = ap.parse_args()
    if a.from_json:
        with open(a.from_json) as f:
            saved = json.load(f)
        report(saved, a)
        return

    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    a.bench = os.path.join(target, "release", "examples", "bench")
    a.qrepack = os.path.join(target, "release", "qrepack")
    if not a.no_build:
        subprocess.run(["nice", "-n", "19", "cargo", "build", "--release", "-j2", "-p", "qrepack-candle",
                        "--features", "stock", "--example", "bench"], cwd=ROOT, check=True)
        if a.synth:
            subprocess.run(["nice", "-n", "19", "cargo", "build", "--release", "-j2", "-p", "qrepack-cli"],
                           cwd=ROOT, check=True)
    if not a.models:
        a.models = [] if a.synth else DEFAULT_MODELS
    a.models += [synth_model(a, s) for s in a.synth]
    keys = a.engines.split(",")
    has_bench = os.access(a.llama_bench, os.X_OK)
    keys = [("llamabench" if has_bench else "llama") if k == "llamacpp" else k for k in keys]
    if "llamabench" in keys and not has_bench:
        sys.exit(f"{a.llama_bench} missing: run ../shared/llamacpp/build.sh (or --engines llama)")
    if "llama" in keys and not os.access(a.llama, os.X_OK):
        sys.exit(f"{a.llama} missing: run scripts/llama_peer/build.sh")

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    avx512 = " ".join(f for f in flags if f.startswith("avx512")) or "none"

    quiet = wait_quiet(a.wait_quiet, a.wait_max) if a.wait_quiet > 0 else None
    engines = [(n, f) for k, n, f in (("llamabench", "llama.cpp", lambda m: llamabench_once(a, m)),
                                      ("llama", "llama.cpp (peer)", lambda m: llama_once(a, m)),
                                      ("qrepack", "qrepack-candle", lambda m: candle_once(a, m, "qrepack")),
                                      ("stock", "stock candle", lambda m: candle_once(a, m, "stock")))
               if k in keys]
    res = {}
    for model in a.models:
        r = {name: {"prompt": [], "gen": [], "tg": []} for name, _ in engines}
        failed = set()
        for i in range(a.runs):
            for name, f in engines:
                if name in failed:
                    continue
                try:
                    x = f(model)
                except EngineError as e:
                    print(f"# {os.path.basename(model)} {name}: {e}", file=sys.stderr, flush=True)
                    failed.add(name)
                    continue
                for k, v in x.items():
                    r[name][k].append(v)
                print(f"# {os.path.basename(model)} run {i} {name}: " +
                      ", ".join(f"{k} {v:.1f}" for k, v in x.items()) + f"  (load {load1():.2f})",
                      file=sys.stderr, flush=True)
        res[model] = {name: v for name, v in r.items() if name not in failed}

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    saved = {"cpu": cpu, "avx512": avx512, "date": time.strftime("%Y-%m-%d"), "commit": commit,
             "threads": a.threads, "prompt": a.prompt, "gen": a.gen, "runs": a.runs,
             "quiet": quiet, "wait_quiet": a.wait_quiet, "results": res}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(saved, f, indent=1)
    report(saved, a)


def report(saved, a):
    res, prompt, gen = saved["results"], saved["prompt"], saved["gen"]
    quiet, limit = saved["quiet"], saved["wait_quiet"]
    print(f"{saved['cpu']}; AVX-512: {saved['avx512']}; {saved['date']}, commit {saved['commit']}")
    print(f"{saved['threads']} threads, prompt {prompt} tokens (one batch), {gen} generated; "
          f"tokens/s, best of {saved['runs']} alternating runs (median); 1-min load at start "
          f"{'< ' + str(limit) if quiet else 'above ' + str(limit) if quiet is False else 'not checked'}\n")
    print(f"| model | engine | pp{prompt} | tg{gen} d0 (empty cache) | tg{gen} d{prompt} (after the prompt) |")
    print("|---|---|---:|---:|---:|")
    for model, r in res.items():
        for eng in r:
            print(f"| {short_name(model)} | {eng} | {fmt(r[eng]['prompt'])} | {fmt(r[eng]['tg'])} | {fmt(r[eng]['gen'])} |")
    print()
    print(f"| model | qrepack-candle / | pp (target) | tg d0 (target) | tg d{prompt} (target) |")
    print("|---|---|---:|---:|---:|")
    for model, r in res.items():
        for peer, key in (("stock candle", "candle"), ("llama.cpp", "llama"), ("llama.cpp (peer)", "llama")):
            if "qrepack-candle" not in r or peer not in r:
                continue
            cells = []
            for what in ("prompt", "tg", "gen"):
                ours, theirs = r["qrepack-candle"][what], r[peer][what]
                if not ours or not theirs:
                    cells.append("-")
                    continue
                ratio = max(ours) / max(theirs)
                t = target(model, what, key)
                cells.append(f"{ratio:.2f}x" + (f" (>= {t}x: {'met' if ratio >= t else 'NOT met'})" if t else ""))
            print(f"| {short_name(model)} | {peer} | {cells[0]} | {cells[1]} | {cells[2]} |")
    if a.plot:
        title = (f"{saved['cpu']}, {saved['threads']} threads; {saved['date']}, commit {saved['commit']}; "
                 f"best of {saved['runs']}")
        with open(a.plot, "w") as f:
            f.write(svg_bars(res, title, prompt, gen))
        print(f"# wrote {a.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
