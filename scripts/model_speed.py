#!/usr/bin/env python3
"""Model-level speed, three engines on the same GGUF files: llama.cpp (scripts/llama_peer, the
llama-bench method), qrepack-candle and stock candle-transformers `quantized_llama` (the
`bench` example of crates/qrepack-candle). Prints a markdown table.

    scripts/llama_peer/build.sh                  # once: $WORK/bin/llama_speed (WORK=/tmp/llama-peer)
    scripts/model_speed.py [MODEL.gguf ...]      # default: /tmp/smol/SmolLM2-135M-Instruct.{q4_0,q4_K}.gguf

Options: --threads 2 --prompt 512 --gen 128 --runs 3 --wait-quiet 0.5 --wait-max 1200
         --engines llama,qrepack,stock --poll 50 --llama PATH (default $WORK/bin/llama_speed) --no-build

Each run is one process per engine, the engines alternating run by run (llama.cpp, qrepack-candle,
stock candle, llama.cpp, ...); every process does one untimed warm-up pass (prompt + generation)
and one timed pass, the KV cache cleared in between. The table gives the best of the runs (the
machine may be shared) and the median in brackets. "prompt" is the P-token prompt as one batch
(llama.cpp pp512); "gen" is G single-token steps after that prompt (positions P..P+G-1), what the
candle bench times; llama.cpp's own tg128 (from an empty cache, as llama-bench) is listed too.
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
TARGETS = {  # issue 16: qrepack-candle / peer
    ("prompt", "candle"): 2.0,
    ("prompt", "llama"): 1.2,
    ("gen", "candle"): 1.2,
    ("gen", "llama"): 1.0,
}


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


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout, p.stderr


def llama_once(a, model):
    out, _ = run([a.llama, model, "-t", str(a.threads), "-p", str(a.prompt), "-n", str(a.gen),
                  "-r", "1", "--poll", str(a.poll), "--json"])
    j = json.loads(out.strip().splitlines()[-1])
    return {"prompt": j["pp"], "gen": j["tg_depth"], "tg": j["tg"]}


def candle_once(a, model, who):
    # --reps 2: rep 0 is the warm-up, rep 1 the timed pass
    _, err = run([a.bench, model, "--threads", str(a.threads), "--prompt", str(a.prompt),
                  "--gen", str(a.gen), "--reps", "2", "--only", who])
    tag = "qrepack-candle" if who == "qrepack" else "stock candle"
    m = re.findall(r"rep 1 " + re.escape(tag) + r":\s+prompt ([0-9.]+) s, generation ([0-9.]+) s", err)
    if not m:
        sys.exit(f"cannot parse bench output:\n{err}")
    p, g = map(float, m[-1])
    return {"prompt": a.prompt / p, "gen": a.gen / g}


def fmt(v):
    return f"{max(v):.1f} ({statistics.median(v):.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--wait-quiet", type=float, default=0.5, help="wait for a 1-min load below this (0: don't)")
    ap.add_argument("--wait-max", type=float, default=1200)
    ap.add_argument("--llama", default=os.path.join(os.environ.get("WORK", "/tmp/llama-peer"), "bin", "llama_speed"))
    ap.add_argument("--poll", type=int, default=50, help="llama.cpp threadpool poll level (llama-bench: 50)")
    ap.add_argument("--engines", default="llama,qrepack,stock", help="comma-separated subset of llama,qrepack,stock")
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()

    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    a.bench = os.path.join(target, "release", "examples", "bench")
    if not a.no_build:
        subprocess.run(["nice", "-n", "19", "cargo", "build", "--release", "-j2", "-p", "qrepack-candle",
                        "--features", "stock", "--example", "bench"], cwd=ROOT, check=True)
    if not os.access(a.llama, os.X_OK):
        sys.exit(f"{a.llama} missing: run scripts/llama_peer/build.sh")

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    avx512 = " ".join(f for f in flags if f.startswith("avx512")) or "none"

    quiet = wait_quiet(a.wait_quiet, a.wait_max) if a.wait_quiet > 0 else None
    engines = [(n, f) for k, n, f in (("llama", "llama.cpp", lambda m: llama_once(a, m)),
                                      ("qrepack", "qrepack-candle", lambda m: candle_once(a, m, "qrepack")),
                                      ("stock", "stock candle", lambda m: candle_once(a, m, "stock")))
               if k in a.engines.split(",")]
    res = {}
    for model in a.models:
        r = {name: {"prompt": [], "gen": [], "tg": []} for name, _ in engines}
        for i in range(a.runs):
            for name, f in engines:
                x = f(model)
                for k, v in x.items():
                    r[name][k].append(v)
                print(f"# {os.path.basename(model)} run {i} {name}: " +
                      ", ".join(f"{k} {v:.1f}" for k, v in x.items()) + f"  (load {load1():.2f})",
                      file=sys.stderr, flush=True)
        res[model] = r

    print(f"{cpu}; AVX-512: {avx512}")
    print(f"{a.threads} threads, prompt {a.prompt} tokens (one batch), {a.gen} generated; "
          f"tokens/s, best of {a.runs} alternating runs (median); 1-min load at start "
          f"{'< ' + str(a.wait_quiet) if quiet else 'above ' + str(a.wait_quiet) if quiet is False else 'not checked'}\n")
    print(f"| model | engine | prompt pp{a.prompt} | gen tg{a.gen} after the prompt | tg{a.gen} from empty cache |")
    print("|---|---|---:|---:|---:|")
    for model, r in res.items():
        name = os.path.basename(model).replace("SmolLM2-135M-Instruct.", "SmolLM2-135M ").replace(".gguf", "")
        for eng in r:
            tg = fmt(r[eng]["tg"]) if r[eng]["tg"] else "-"
            print(f"| {name} | {eng} | {fmt(r[eng]['prompt'])} | {fmt(r[eng]['gen'])} | {tg} |")
    print()
    print("| model | qrepack-candle / | prompt (target) | gen (target) |")
    print("|---|---|---:|---:|")
    for model, r in res.items():
        name = os.path.basename(model).replace("SmolLM2-135M-Instruct.", "SmolLM2-135M ").replace(".gguf", "")
        for peer, key in (("stock candle", "candle"), ("llama.cpp", "llama")):
            if "qrepack-candle" not in r or peer not in r:
                continue
            cells = []
            for what in ("prompt", "gen"):
                ratio = max(r["qrepack-candle"][what]) / max(r[peer][what])
                t = TARGETS[(what, key)]
                cells.append(f"{ratio:.2f}x (>= {t}x: {'met' if ratio >= t else 'NOT met'})")
            print(f"| {name} | {peer} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
