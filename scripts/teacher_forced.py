#!/usr/bin/env python3
"""Teacher-forced comparison of qrepack-candle with llama.cpp on real GGUF files.

For each model and prompt, llama.cpp (scripts/llama_topk) tokenizes the prompt and takes N
greedy steps, printing its greedy token and top-K logits at each. qrepack-candle's `generate`
example then runs llama.cpp's prompt ids and is fed llama.cpp's token after every step
(`--force`), so both models see the same sequence throughout. A step passes when the greedy
tokens agree, or when either model has its top two logits within 0.1 of each other (a near
tie, excused); and when the two top-K lists share at least K-1 ids. qrepack's own tokenizer
is checked against llama.cpp's ids on the same text. With `--tokens 1,2,3` the prompt is those
ids; with `--top` as large as the vocabulary (small synthetic models, `qrepack synth --distinct`)
every logit of every step is compared (the largest difference relative to the logits' rms).
`--kv f32` keeps both engines' key/value caches in f32 (llama.cpp's default and qrepack-candle's
is f16): small random models can be sensitive enough to f16 rounding to hide all else.

    scripts/llama_topk/build.sh                  # once, after ../shared/llamacpp/build.sh
    cargo build --release -p qrepack-candle --example generate
    scripts/teacher_forced.py MODEL.gguf [MODEL.gguf ...] [--steps 16] [--top 5] [--chat]
        [--prompt TEXT ... | --tokens 1,2,3] [--threads 2] [--json]

Exit status 0 when every step of every prompt passes.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PROMPTS = [
    "The capital of France is",
    "Write a short poem about the sea.",
    "def fibonacci(n):",
]
NEAR_TIE = 0.1


def chat_text(prompt, model_path):
    """The chat template of the model's family, by its special tokens (as `generate --chat`)."""
    name = os.path.basename(model_path).lower()
    if "gemma" in name:
        return f"<start_of_turn>user\n{prompt}<end_of_turn>\n<start_of_turn>model\n"
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def json_lines(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def gap(top):
    return top[0][1] - top[1][1] if len(top) > 1 else float("inf")


def compare(model, text, args):
    arg = "ids:" + text if args.tokens else text
    ref = json_lines([args.llama_topk, model, arg, str(args.steps), str(args.top), str(args.threads),
                      args.kv])
    ids = ref[0]["prompt"]
    ref_steps = ref[1:]
    forced = ",".join(str(s["token"]) for s in ref_steps)
    gen = [args.generate, model, "--tokens", ",".join(map(str, ids)), "--force", forced,
           "--steps", str(args.steps), "--top", str(args.top), "--json", "--threads", str(args.threads),
           "--kv", args.kv]
    ours = json_lines(gen)[1:]
    # qrepack's tokenizer on the same text (BOS as llama.cpp adds it)
    tok = ids if args.tokens else json_lines(
        [args.generate, model, "--prompt", text, "--steps", "1", "--top", "1", "--json",
         "--threads", str(args.threads)])[0]["prompt"]
    steps = []
    for r, o in zip(ref_steps, ours):
        shared = len({t for t, _ in r["top"]} & {t for t, _ in o["top"]})
        ours_by_id = dict((t, l) for t, l in o["top"])
        diffs = [abs(l - ours_by_id[t]) for t, l in r["top"] if t in ours_by_id]
        rms = (sum(l * l for _, l in r["top"]) / len(r["top"])) ** 0.5
        same = r["token"] == o["token"]
        tie = gap(r["top"]) < NEAR_TIE or gap(o["top"]) < NEAR_TIE
        steps.append({
            "step": r["step"], "llama": r["token"], "qrepack": o["token"], "same": same,
            "near_tie": (not same) and tie, "shared_top": shared,
            "ok": (same or tie) and shared >= args.top - 1,
            "llama_logit": r["top"][0][1], "qrepack_logit": o["top"][0][1],
            "max_logit_diff": max(diffs, default=0.0), "logit_rms": rms,
        })
    return {
        "model": os.path.basename(model), "prompt": text, "prompt_tokens": len(ids),
        "tokenizer_agrees": tok == ids, "steps": steps,
        "ok": len(steps) == args.steps and all(s["ok"] for s in steps),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--prompt", action="append", help="a prompt (repeatable; default: three built in)")
    ap.add_argument("--tokens", help="the prompt as token ids, e.g. 1,500,17")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv", choices=["f16", "f32"], default="f16", help="key/value cache type of both engines")
    ap.add_argument("--chat", action="store_true", help="wrap each prompt in the family's chat template")
    ap.add_argument("--json", action="store_true", help="one JSON object per model and prompt")
    ap.add_argument("--llama-topk", default=os.path.join(
        os.environ.get("TMPDIR", "/tmp"), "llamacpp/src/llama.cpp/build/bin/llama_topk"))
    ap.add_argument("--generate", default=os.path.join(ROOT, "target/release/examples/generate"))
    args = ap.parse_args()
    for tool, how in [(args.llama_topk, "scripts/llama_topk/build.sh"),
                      (args.generate, "cargo build --release -p qrepack-candle --example generate")]:
        if not os.access(tool, os.X_OK):
            sys.exit(f"{tool} is missing: {how}")
    all_ok = True
    for model in args.models:
        for p in [args.tokens] if args.tokens else args.prompt or DEFAULT_PROMPTS:
            text = chat_text(p, model) if args.chat and not args.tokens else p
            r = compare(model, text, args)
            all_ok &= r["ok"]
            if args.json:
                print(json.dumps(r))
                continue
            agree = sum(s["same"] for s in r["steps"])
            ties = sum(s["near_tie"] for s in r["steps"])
            worst = min((s["shared_top"] for s in r["steps"]), default=0)
            rel = max((s["max_logit_diff"] / s["logit_rms"] for s in r["steps"] if s["logit_rms"] > 0),
                      default=0.0)
            print(f"{r['model']:32} {p[:34]!r:38} {r['prompt_tokens']:3} tokens  "
                  f"greedy {agree}/{len(r['steps'])} (+{ties} near ties)  top-{args.top} shared >= {worst}  "
                  f"max logit diff {rel:.1e} of rms  "
                  f"tokenizer {'same' if r['tokenizer_agrees'] else 'DIFFERS'}  {'ok' if r['ok'] else 'FAIL'}")
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
