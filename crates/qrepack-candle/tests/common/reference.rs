//! The reference forward pass: written here in f64, straight from the definitions (llama.cpp's
//! `src/models/{llama,qwen3,gemma3,qwen3moe,olmoe,openai-moe}.cpp`, `build_moe_ffn`, and
//! ggml's `rope_yarn`), on the
//! dequantized weights, with no KV cache: every position recomputed from the whole prefix.
#![allow(dead_code)] // not every test file that includes `common` asks for all of it

use qrepack::quant::dequantize_f64;
use qrepack::Model;
use qrepack_candle::weights::ggml_bytes;

use super::Tiny;

/// Tensor `name` dequantized to f64, row-major (`rows x cols` for a matrix; the experts of a
/// 3-D tensor one after the other).
pub fn f64s(m: &Model, name: &str) -> Vec<f64> {
    let (bytes, ty, dims) = ggml_bytes(m, name).unwrap();
    let cols = dims[0];
    let n: usize = dims.iter().product();
    dequantize_f64(ty, &bytes, n / cols, cols).unwrap()
}

/// `W x` for a row-major `W` with `x.len()` columns.
pub fn matvec(w: &[f64], x: &[f64]) -> Vec<f64> {
    w.chunks_exact(x.len())
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

pub fn rms_norm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v * inv * w).collect()
}

/// Rotates one head at position `pos`: pair `i` by `pos * base^(-2i/d) / factor_i`, pairs
/// `(2i, 2i+1)` (Llama) or `(i, i + d/2)` (NeoX); with YaRN `(factor, original context)`,
/// the angle is blended between that and `1 / factor` of it (all of it for the pairs that
/// turn 32 times or more over the original context, none for those that turn once or less,
/// linearly between), and the rotation scaled by `1 + 0.1 ln(factor)`.
pub fn rope(
    head: &mut [f64],
    pos: usize,
    base: f64,
    factors: Option<&[f64]>,
    neox: bool,
    yarn: Option<(f64, usize)>,
) {
    let d = head.len();
    // the pair index where a pair turns `turns` times over the original context
    let pair_at = |orig: usize, turns: f64| {
        d as f64 * (orig as f64 / (turns * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
    };
    for i in 0..d / 2 {
        let f = factors.map_or(1.0, |f| f[i]);
        let extrap = pos as f64 * base.powf(-((2 * i) as f64) / d as f64) / f;
        let (theta, magnitude) = match yarn {
            None => (extrap, 1.0),
            Some((factor, orig)) => {
                let low = pair_at(orig, 32.0).floor().max(0.0);
                let high = pair_at(orig, 1.0).ceil().min(d as f64 - 1.0);
                let keep = 1.0 - ((i as f64 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
                let theta = extrap / factor * (1.0 - keep) + extrap * keep;
                (theta, 1.0 + 0.1 * factor.ln())
            }
        };
        let (a, b) = if neox {
            (i, i + d / 2)
        } else {
            (2 * i, 2 * i + 1)
        };
        let (x0, x1) = (head[a], head[b]);
        head[a] = (x0 * theta.cos() - x1 * theta.sin()) * magnitude;
        head[b] = (x0 * theta.sin() + x1 * theta.cos()) * magnitude;
    }
}

pub fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
}

pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// What [`reference_full`] computes.
pub struct Reference {
    /// The logits after every token.
    pub logits: Vec<Vec<f64>>,
    /// The smallest gap, over every row of every mixture-of-experts layer, between the router
    /// logit of the last expert chosen and that of the first left out (infinite without
    /// experts): a choice that f32 rounding in the decoder could flip is a gap near 0.
    pub routing_margin: f64,
}

/// The logits after every token of `ids`, computed from scratch in f64.
pub fn reference(t: &Tiny, m: &Model, ids: &[u32]) -> Vec<Vec<f64>> {
    reference_full(t, m, ids).logits
}

/// gpt-oss's clamped SwiGLU.
pub fn swiglu_oai(g: f64, u: f64) -> f64 {
    let g = g.min(7.0);
    g / (1.0 + (-1.702 * g).exp()) * (u.clamp(-7.0, 7.0) + 1.0)
}

/// `y += b` when the model has the bias `name`.
fn add_bias(m: &Model, name: &str, y: &mut [f64]) {
    if m.tensor(name).is_some() {
        y.iter_mut().zip(f64s(m, name)).for_each(|(y, b)| *y += b);
    }
}

/// The mixture-of-experts layer `il` on one normed row `h`: the router logits (plus their
/// bias), the `n_expert_used` largest; their weights the softmax over all experts
/// (renormalized unless OLMoE) or, for gpt-oss, over the chosen ones; each expert's gated
/// feed-forward output (plus its biases) weighted. Also the routing margin of the row.
fn moe(t: &Tiny, m: &Model, il: usize, h: &[f64]) -> (Vec<f64>, f64) {
    let w = |s: &str| f64s(m, &format!("blk.{il}.{s}.weight"));
    let (n, k, ff, e) = (t.n_expert, t.n_expert_used, t.n_ff_expert, t.n_embd);
    let oai = t.arch == "gpt-oss";
    let mut logits = matvec(&w("ffn_gate_inp"), h);
    add_bias(m, &format!("blk.{il}.ffn_gate_inp.bias"), &mut logits);
    let max = logits.iter().copied().fold(f64::MIN, f64::max);
    let sum: f64 = logits.iter().map(|l| (l - max).exp()).sum();
    let probs: Vec<f64> = logits.iter().map(|l| (l - max).exp() / sum).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    let margin = if k < n {
        logits[order[k - 1]] - logits[order[k]]
    } else {
        f64::INFINITY
    };
    let chosen = &order[..k];
    let top_sum: f64 = chosen.iter().map(|&x| (logits[x] - max).exp()).sum();
    let total: f64 = if t.arch == "olmoe" || oai {
        1.0
    } else {
        chosen.iter().map(|&x| probs[x]).sum()
    };
    let (gate, up, down) = (w("ffn_gate_exps"), w("ffn_up_exps"), w("ffn_down_exps"));
    let bias = |part: &str, x: usize, width: usize| {
        let name = format!("blk.{il}.ffn_{part}_exps.bias");
        m.tensor(&name)
            .map(|_| f64s(m, &name)[x * width..][..width].to_vec())
    };
    let plus = |mut v: Vec<f64>, b: Option<Vec<f64>>| {
        if let Some(b) = b {
            v.iter_mut().zip(b).for_each(|(v, b)| *v += b);
        }
        v
    };
    let mut y = vec![0.0; e];
    for &x in chosen {
        let g = plus(
            matvec(&gate[x * ff * e..][..ff * e], h),
            bias("gate", x, ff),
        );
        let u = plus(matvec(&up[x * ff * e..][..ff * e], h), bias("up", x, ff));
        let act: Vec<f64> = g
            .iter()
            .zip(&u)
            .map(|(g, u)| {
                if oai {
                    swiglu_oai(*g, *u)
                } else {
                    silu(*g) * u
                }
            })
            .collect();
        let d = plus(
            matvec(&down[x * e * ff..][..e * ff], &act),
            bias("down", x, e),
        );
        let weight = if oai {
            (logits[x] - max).exp() / top_sum
        } else {
            probs[x] / total
        };
        y.iter_mut().zip(&d).for_each(|(y, d)| *y += weight * d);
    }
    (y, margin)
}

/// [`reference`] with the routing margin.
pub fn reference_full(t: &Tiny, m: &Model, ids: &[u32]) -> Reference {
    let gemma = t.arch == "gemma3";
    let oai = t.arch == "gpt-oss";
    let yarn = t.yarn.map(|(f, o)| (f as f64, o));
    let neox = t.arch != "llama";
    let (e, hd, eps) = (t.n_embd, t.head_dim(), t.eps as f64);
    let (nh, nkv) = (t.n_head, t.n_kv_head);
    let embd = f64s(m, "token_embd.weight");
    let factors = t.rope_freqs.then(|| f64s(m, "rope_freqs.weight"));
    let mut routing_margin = f64::INFINITY;
    let mut x: Vec<Vec<f64>> = ids
        .iter()
        .map(|&id| {
            let row = &embd[id as usize * e..][..e];
            let s = if gemma { (e as f64).sqrt() } else { 1.0 };
            row.iter().map(|v| v * s).collect()
        })
        .collect();
    for il in 0..t.n_layer {
        let w = |s: &str| f64s(m, &format!("blk.{il}.{s}.weight"));
        let name = |s: &str| format!("blk.{il}.{s}");
        // Gemma 3: layer il is global when (il + 1) % 6 == 0; gpt-oss: when il is odd
        let local = (gemma && (il + 1) % 6 != 0) || (oai && il % 2 == 0);
        let window = if local { t.sliding_window } else { None };
        let base = if local && gemma {
            10_000.0
        } else {
            t.rope_base as f64
        };
        let sinks = t.sinks_and_biases.then(|| w("attn_sinks"));
        let (wq, wk, wv, wo) = (w("attn_q"), w("attn_k"), w("attn_v"), w("attn_output"));
        let dense = (t.n_expert == 0).then(|| (w("ffn_gate"), w("ffn_up"), w("ffn_down")));
        let (mut qs, mut ks, mut vs) = (Vec::new(), Vec::new(), Vec::new());
        for (p, xp) in x.iter().enumerate() {
            let h = rms_norm(xp, &w("attn_norm"), eps);
            let (mut q, mut k, mut v) = (matvec(&wq, &h), matvec(&wk, &h), matvec(&wv, &h));
            add_bias(m, &name("attn_q.bias"), &mut q);
            add_bias(m, &name("attn_k.bias"), &mut k);
            add_bias(m, &name("attn_v.bias"), &mut v);
            for (vec, norm, n) in [(&mut q, "attn_q_norm", nh), (&mut k, "attn_k_norm", nkv)] {
                let nw = t.qk_norm.then(|| w(norm));
                if t.qk_norm_whole {
                    // OLMoE: one norm over all heads, then RoPE per head
                    let normed = rms_norm(&vec[..n * hd], nw.as_ref().unwrap(), eps);
                    vec[..n * hd].copy_from_slice(&normed);
                }
                for head in vec[..n * hd].chunks_exact_mut(hd) {
                    if let (Some(nw), false) = (&nw, t.qk_norm_whole) {
                        let normed = rms_norm(head, nw, eps);
                        head.copy_from_slice(&normed);
                    }
                    rope(head, p, base, factors.as_deref(), neox, yarn);
                }
            }
            qs.push(q);
            ks.push(k);
            vs.push(v);
        }
        for (p, xp) in x.iter_mut().enumerate() {
            let mut attn = vec![0.0; nh * hd];
            let lo = window.map_or(0, |win| (p + 1).saturating_sub(win));
            for h in 0..nh {
                let g = h / (nh / nkv);
                let q = &qs[p][h * hd..][..hd];
                let scores: Vec<f64> = (lo..=p)
                    .map(|j| {
                        let k = &ks[j][g * hd..][..hd];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt()
                    })
                    .collect();
                // a sink is one more logit in the softmax, with no value
                let sink = sinks.as_ref().map(|s| s[h]);
                let max = scores
                    .iter()
                    .copied()
                    .fold(sink.unwrap_or(f64::MIN), f64::max);
                let ex: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = ex.iter().sum::<f64>() + sink.map_or(0.0, |z| (z - max).exp());
                for (j, wgt) in (lo..=p).zip(&ex) {
                    let v = &vs[j][g * hd..][..hd];
                    for (o, v) in attn[h * hd..][..hd].iter_mut().zip(v) {
                        *o += wgt / sum * v;
                    }
                }
            }
            let mut o = matvec(&wo, &attn);
            add_bias(m, &name("attn_output.bias"), &mut o);
            if t.post_norms {
                o = rms_norm(&o, &w("post_attention_norm"), eps);
            }
            xp.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let h = rms_norm(
                xp,
                &w(if oai {
                    "post_attention_norm"
                } else {
                    "ffn_norm"
                }),
                eps,
            );
            let mut y = match &dense {
                Some((gate, up, down)) => {
                    let (g, u) = (matvec(gate, &h), matvec(up, &h));
                    let act: Vec<f64> = g
                        .iter()
                        .zip(&u)
                        .map(|(g, u)| (if gemma { gelu_tanh(*g) } else { silu(*g) }) * u)
                        .collect();
                    matvec(down, &act)
                }
                None => {
                    let (y, margin) = moe(t, m, il, &h);
                    routing_margin = routing_margin.min(margin);
                    y
                }
            };
            if t.post_norms {
                y = rms_norm(&y, &w("post_ffw_norm"), eps);
            }
            xp.iter_mut().zip(&y).for_each(|(a, b)| *a += b);
        }
    }
    let head = if t.output.is_some() {
        f64s(m, "output.weight")
    } else {
        f64s(m, "token_embd.weight")
    };
    let out_norm = f64s(m, "output_norm.weight");
    let logits = x
        .iter()
        .map(|xp| {
            let logits = matvec(&head, &rms_norm(xp, &out_norm, eps));
            match t.softcap {
                Some(c) => logits
                    .iter()
                    .map(|l| c as f64 * (l / c as f64).tanh())
                    .collect(),
                None => logits,
            }
        })
        .collect();
    Reference {
        logits,
        routing_margin,
    }
}
