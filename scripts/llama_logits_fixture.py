#!/usr/bin/env python3
"""Writes llama.cpp's logits on a GGUF file as a text fixture for the qrepack-candle tests.

llama.cpp (scripts/llama_topk, f32 key/value cache) runs the prompt ids and greedy steps; the
fixture holds, per step, llama.cpp's greedy token and every logit in token order:

    # llama.cpp <commit>, <file>, prompt <ids>
    prompt 5 17 300 ...
    step 0 token 4 logits 2.67072 -0.1234 ...

    QREPACK_TINY_DIR=/tmp/tiny cargo test --release -p qrepack-candle --test arch \\
        write_tiny_files -- --ignored
    scripts/llama_logits_fixture.py /tmp/tiny/tiny-gpt-oss.f32.gguf 5,17,300,2,99,250,17,3,64,128 \\
        --vocab 320 -o crates/qrepack-candle/tests/fixtures/llama_cpp_gpt_oss_f32.txt
"""
import argparse
import json
import os
import subprocess

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("ids", help="prompt token ids, comma-separated")
ap.add_argument("--vocab", type=int, required=True)
ap.add_argument("--steps", type=int, default=16)
ap.add_argument("--llama-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                     "llamacpp/src/llama.cpp"))
ap.add_argument("-o", "--output", required=True)
a = ap.parse_args()

topk = os.path.join(a.llama_dir, "build/bin/llama_topk")
out = subprocess.run([topk, a.model, "ids:" + a.ids, str(a.steps), str(a.vocab), "2", "f32"],
                     check=True, capture_output=True, text=True).stdout
commit = subprocess.run(["git", "-C", a.llama_dir, "log", "-1", "--format=%h"],
                        capture_output=True, text=True).stdout.strip() or "unknown"
lines = [f"# llama.cpp {commit}, {os.path.basename(a.model)}, f32 cache, prompt {a.ids}"]
for rec in (json.loads(l) for l in out.splitlines() if l.startswith("{")):
    if "prompt" in rec:
        lines.append("prompt " + " ".join(map(str, rec["prompt"])))
        continue
    logits = [None] * a.vocab
    for tok, v in rec["top"]:
        logits[tok] = v
    assert all(v is not None for v in logits), "--vocab must be the model's vocabulary size"
    lines.append(f"step {rec['step']} token {rec['token']} logits "
                 + " ".join(f"{v:.6g}" for v in logits))
with open(a.output, "w") as f:
    f.write("\n".join(lines) + "\n")
print(a.output)
