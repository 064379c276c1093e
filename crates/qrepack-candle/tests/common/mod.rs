//! A tiny random Llama-family GGUF file, written in memory with `qrepack::gguf::GgufWriter`,
//! the f64 forward pass the decoder is checked against ([`reference`]), and the comparisons
//! built on it ([`compare`]).

pub mod compare;
pub mod reference;

use qrepack::gguf::{GgufValue, GgufValueType, GgufWriter};
use qrepack::rng::SplitMix64;
use qrepack::{quantize, GgmlType};

/// The shape and weight types of a synthetic model.
#[derive(Clone)]
pub struct Tiny {
    pub arch: &'static str,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub n_ff: usize,
    pub vocab: usize,
    /// Types of attn_q/k/v/output, ffn_gate/up, ffn_down, and the token embedding.
    pub attn: GgmlType,
    pub ffn: GgmlType,
    pub down: GgmlType,
    pub embd: GgmlType,
    /// A separate output head (else tied to the embedding).
    pub output: Option<GgmlType>,
    /// q/k/v biases (Qwen2).
    pub qkv_bias: bool,
    /// Head width when it is not `n_embd / n_head` (`<arch>.attention.key_length`).
    pub head_dim: Option<usize>,
    /// RMS norms of the q and k heads (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// RMS norms after the attention and feed-forward outputs (Gemma 3).
    pub post_norms: bool,
    /// RoPE frequency divisors (`rope_freqs.weight`, Llama 3.1), random in [1, 8].
    pub rope_freqs: bool,
    /// `<arch>.attention.sliding_window`.
    pub sliding_window: Option<usize>,
    /// `<arch>.rope.freq_base`.
    pub rope_base: f32,
    /// `<arch>.attention.layer_norm_rms_epsilon`.
    pub eps: f32,
    /// `<arch>.final_logit_softcapping`.
    pub softcap: Option<f32>,
    /// The q and k norms over all heads at once (OLMoE).
    pub qk_norm_whole: bool,
    /// Experts per layer (0: dense feed-forward layers), then how many each token uses, the
    /// width of each, and the router's type; the experts have the types of `ffn` and `down`.
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_ff_expert: usize,
    pub router: GgmlType,
    /// gpt-oss: attention sinks, the output projection's bias, the router's and experts'
    /// biases.
    pub sinks_and_biases: bool,
    /// YaRN RoPE scaling: the factor and the original context.
    pub yarn: Option<(f32, usize)>,
}

impl Tiny {
    pub fn llama() -> Tiny {
        Tiny {
            arch: "llama",
            n_layer: 3,
            n_embd: 256,
            n_head: 4,
            n_kv_head: 2,
            n_ff: 512,
            vocab: 384,
            attn: GgmlType::Q4_0,
            ffn: GgmlType::Q4_K,
            down: GgmlType::Q5_0,
            embd: GgmlType::Q6_K,
            output: None,
            qkv_bias: false,
            head_dim: None,
            qk_norm: false,
            post_norms: false,
            rope_freqs: false,
            sliding_window: None,
            rope_base: 10000.0,
            eps: 1e-5,
            softcap: None,
            qk_norm_whole: false,
            n_expert: 0,
            n_expert_used: 0,
            n_ff_expert: 0,
            router: GgmlType::F32,
            sinks_and_biases: false,
            yarn: None,
        }
    }

    /// gpt-oss: four layers (the even ones local, a window of 3), eight experts of which two
    /// are used, MXFP4 experts, YaRN with a factor of 32 over an original context of 64 (so
    /// that the ramp falls inside the head's pairs), sinks and biases.
    #[allow(dead_code)] // tests/arch.rs asks for it
    pub fn gpt_oss() -> Tiny {
        Tiny {
            arch: "gpt-oss",
            n_layer: 4,
            n_embd: 128,
            n_head: 4,
            n_kv_head: 2,
            head_dim: Some(64),
            n_ff: 0,
            vocab: 320,
            attn: GgmlType::Q8_0,
            ffn: GgmlType::MXFP4,
            down: GgmlType::MXFP4,
            embd: GgmlType::Q8_0,
            output: Some(GgmlType::Q8_0),
            qkv_bias: true,
            sliding_window: Some(3),
            rope_base: 150_000.0,
            n_expert: 8,
            n_expert_used: 2,
            n_ff_expert: 64,
            sinks_and_biases: true,
            yarn: Some((32.0, 64)),
            ..Tiny::llama()
        }
    }

    /// The width of one head.
    #[allow(dead_code)] // not every test file that includes `common` asks
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.n_embd / self.n_head)
    }

    #[allow(dead_code)] // tests/arch.rs builds its shapes from `llama()`
    pub fn qwen2() -> Tiny {
        Tiny {
            arch: "qwen2",
            n_head: 8,
            n_kv_head: 2,
            attn: GgmlType::Q5_0,
            ffn: GgmlType::Q6_K,
            down: GgmlType::Q4_K,
            embd: GgmlType::Q4_0,
            output: Some(GgmlType::Q6_K),
            qkv_bias: true,
            ..Tiny::llama()
        }
    }

    /// The GGUF file.
    pub fn gguf(&self, seed: u64) -> Vec<u8> {
        let mut rng = SplitMix64::new(seed);
        let mut w = GgufWriter::new();
        let a = self.arch;
        let kv = |w: &mut GgufWriter, k: &str, v: GgufValue| w.add_kv(k, v).unwrap();
        kv(&mut w, "general.architecture", GgufValue::String(a.into()));
        let u = |x: usize| GgufValue::U32(x as u32);
        kv(&mut w, &format!("{a}.block_count"), u(self.n_layer));
        kv(&mut w, &format!("{a}.context_length"), u(512));
        kv(&mut w, &format!("{a}.embedding_length"), u(self.n_embd));
        kv(&mut w, &format!("{a}.feed_forward_length"), u(self.n_ff));
        kv(&mut w, &format!("{a}.attention.head_count"), u(self.n_head));
        kv(
            &mut w,
            &format!("{a}.attention.head_count_kv"),
            u(self.n_kv_head),
        );
        kv(
            &mut w,
            &format!("{a}.rope.freq_base"),
            GgufValue::F32(self.rope_base),
        );
        kv(
            &mut w,
            &format!("{a}.attention.layer_norm_rms_epsilon"),
            GgufValue::F32(self.eps),
        );
        if let Some(hd) = self.head_dim {
            kv(&mut w, &format!("{a}.attention.key_length"), u(hd));
            kv(&mut w, &format!("{a}.attention.value_length"), u(hd));
        }
        if let Some(win) = self.sliding_window {
            kv(&mut w, &format!("{a}.attention.sliding_window"), u(win));
        }
        if self.n_expert > 0 {
            kv(&mut w, &format!("{a}.expert_count"), u(self.n_expert));
            kv(
                &mut w,
                &format!("{a}.expert_used_count"),
                u(self.n_expert_used),
            );
            kv(
                &mut w,
                &format!("{a}.expert_feed_forward_length"),
                u(self.n_ff_expert),
            );
        }
        if let Some((factor, original)) = self.yarn {
            let rope = |k: &str| format!("{a}.rope.scaling.{k}");
            kv(&mut w, &rope("type"), GgufValue::String("yarn".into()));
            kv(&mut w, &rope("factor"), GgufValue::F32(factor));
            kv(&mut w, &rope("original_context_length"), u(original));
        }
        if let Some(c) = self.softcap {
            kv(
                &mut w,
                &format!("{a}.final_logit_softcapping"),
                GgufValue::F32(c),
            );
        }
        kv(
            &mut w,
            "tokenizer.ggml.model",
            GgufValue::String("gpt2".into()),
        );
        let tokens: Vec<GgufValue> = (0..self.vocab)
            .map(|i| GgufValue::String(format!("t{i}")))
            .collect();
        kv(
            &mut w,
            "tokenizer.ggml.tokens",
            GgufValue::Array(GgufValueType::String, tokens),
        );
        kv(
            &mut w,
            "tokenizer.ggml.merges",
            GgufValue::Array(GgufValueType::String, vec![]),
        );

        let hd = self.head_dim.unwrap_or(self.n_embd / self.n_head);
        // a `rows x cols` matrix, or a 3-D tensor of `n` of them (experts) for `Some(n)`
        let mut matrices = |w: &mut GgufWriter,
                            name: &str,
                            ty: GgmlType,
                            rows: usize,
                            cols: usize,
                            experts: Option<usize>| {
            let n = experts.unwrap_or(1);
            // unit-variance outputs for unit-variance inputs
            let scale = (3.0 / cols as f32).sqrt();
            let x: Vec<f32> = (0..n * rows * cols)
                .map(|_| rng.uniform_pm1() * scale)
                .collect();
            let bytes = if !random_bits(ty) {
                quantize(ty, &x, n * rows, cols).unwrap()
            } else {
                random_blocks(ty, n * rows, cols, &mut rng)
            };
            let mut dims = vec![cols as u64, rows as u64];
            if experts.is_some() {
                dims.push(n as u64);
            }
            w.add_tensor_owned(name, &dims, ty.id(), bytes).unwrap();
        };

        let mut vec_rng = SplitMix64::new(seed ^ 0xABCD);
        // f32 values `base +- spread`, of the given dims (the first the fastest)
        let mut values = |w: &mut GgufWriter, name: &str, dims: &[u64], base: f32, spread: f32| {
            let n = dims.iter().product::<u64>() as usize;
            let x: Vec<f32> = (0..n)
                .map(|_| base + spread * vec_rng.uniform_pm1())
                .collect();
            let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
            w.add_tensor_owned(name, dims, GgmlType::F32.id(), bytes)
                .unwrap();
        };

        // the embedding: entries of size ~1
        matrices(
            &mut w,
            "token_embd.weight",
            self.embd,
            self.vocab,
            self.n_embd,
            None,
        );
        for i in 0..self.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}");
            let e = self.n_embd;
            values(&mut w, &n("attn_norm.weight"), &[(e) as u64], 1.0, 0.2);
            matrices(
                &mut w,
                &n("attn_q.weight"),
                self.attn,
                self.n_head * hd,
                e,
                None,
            );
            matrices(
                &mut w,
                &n("attn_k.weight"),
                self.attn,
                self.n_kv_head * hd,
                e,
                None,
            );
            matrices(
                &mut w,
                &n("attn_v.weight"),
                self.attn,
                self.n_kv_head * hd,
                e,
                None,
            );
            if self.qkv_bias {
                values(
                    &mut w,
                    &n("attn_q.bias"),
                    &[(self.n_head * hd) as u64],
                    0.0,
                    0.5,
                );
                values(
                    &mut w,
                    &n("attn_k.bias"),
                    &[(self.n_kv_head * hd) as u64],
                    0.0,
                    0.5,
                );
                values(
                    &mut w,
                    &n("attn_v.bias"),
                    &[(self.n_kv_head * hd) as u64],
                    0.0,
                    0.5,
                );
            }
            matrices(
                &mut w,
                &n("attn_output.weight"),
                self.attn,
                e,
                self.n_head * hd,
                None,
            );
            if self.sinks_and_biases {
                values(&mut w, &n("attn_output.bias"), &[(e) as u64], 0.0, 0.5);
                values(
                    &mut w,
                    &n("attn_sinks.weight"),
                    &[(self.n_head) as u64],
                    1.0,
                    2.0,
                );
            }
            if self.qk_norm {
                let (q, k) = if self.qk_norm_whole {
                    (self.n_head * hd, self.n_kv_head * hd)
                } else {
                    (hd, hd)
                };
                values(&mut w, &n("attn_q_norm.weight"), &[(q) as u64], 1.0, 0.5);
                values(&mut w, &n("attn_k_norm.weight"), &[(k) as u64], 1.0, 0.5);
            }
            if self.post_norms {
                values(
                    &mut w,
                    &n("post_attention_norm.weight"),
                    &[(e) as u64],
                    1.0,
                    0.5,
                );
                values(&mut w, &n("post_ffw_norm.weight"), &[(e) as u64], 1.0, 0.5);
            }
            // gpt-oss stores the norm before the feed-forward layer under another name
            let ffn_norm = if a == "gpt-oss" {
                "post_attention_norm.weight"
            } else {
                "ffn_norm.weight"
            };
            values(&mut w, &n(ffn_norm), &[(e) as u64], 1.0, 0.2);
            if self.n_expert > 0 {
                let (x, ff) = (self.n_expert, self.n_ff_expert);
                matrices(&mut w, &n("ffn_gate_inp.weight"), self.router, x, e, None);
                if self.sinks_and_biases {
                    values(&mut w, &n("ffn_gate_inp.bias"), &[(x) as u64], 0.0, 1.0);
                    let (x, ff, e) = (x as u64, ff as u64, e as u64);
                    values(&mut w, &n("ffn_gate_exps.bias"), &[ff, x], 0.0, 0.5);
                    values(&mut w, &n("ffn_up_exps.bias"), &[ff, x], 0.0, 0.5);
                    values(&mut w, &n("ffn_down_exps.bias"), &[e, x], 0.0, 0.5);
                }
                matrices(&mut w, &n("ffn_gate_exps.weight"), self.ffn, ff, e, Some(x));
                matrices(&mut w, &n("ffn_up_exps.weight"), self.ffn, ff, e, Some(x));
                matrices(
                    &mut w,
                    &n("ffn_down_exps.weight"),
                    self.down,
                    e,
                    ff,
                    Some(x),
                );
            } else {
                matrices(&mut w, &n("ffn_gate.weight"), self.ffn, self.n_ff, e, None);
                matrices(&mut w, &n("ffn_up.weight"), self.ffn, self.n_ff, e, None);
                matrices(&mut w, &n("ffn_down.weight"), self.down, e, self.n_ff, None);
            }
        }
        values(
            &mut w,
            "output_norm.weight",
            &[(self.n_embd) as u64],
            1.0,
            0.2,
        );
        if self.rope_freqs {
            values(&mut w, "rope_freqs.weight", &[(hd / 2) as u64], 4.5, 3.5);
        }
        if let Some(ty) = self.output {
            matrices(&mut w, "output.weight", ty, self.vocab, self.n_embd, None);
        }
        w.to_bytes().unwrap()
    }
}

/// Whether the tiny models hold `ty` as [`random_blocks`] rather than quantized values: the
/// grid, ternary and FP4 types, Q1_0 and Q2_0, which qrepack could not quantize when the tests'
/// seeds (the gpt-oss seeds without a near tie in the routing) were chosen on these models.
pub fn random_bits(ty: GgmlType) -> bool {
    !ty.is_quantizable()
        || matches!(
            ty,
            GgmlType::IQ2_S
                | GgmlType::IQ3_XXS
                | GgmlType::IQ3_S
                | GgmlType::TQ1_0
                | GgmlType::TQ2_0
                | GgmlType::MXFP4
                | GgmlType::NVFP4
                | GgmlType::Q1_0
                | GgmlType::Q2_0
        )
}

/// A `rows x cols` matrix of one of the [`random_bits`] types: random quant bits under small
/// fixed scales, weights of order 0.1.
pub fn random_blocks(ty: GgmlType, rows: usize, cols: usize, rng: &mut SplitMix64) -> Vec<u8> {
    let n = ty.matrix_bytes(rows, cols).unwrap();
    let mut bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
    let d = qrepack::blocks::F16Bits::from_f32(0.004).0;
    for b in bytes.chunks_exact_mut(ty.block_bytes()) {
        match ty {
            GgmlType::TQ1_0 => b[52..54].copy_from_slice(&d),
            GgmlType::TQ2_0 => b[64..66].copy_from_slice(&d),
            GgmlType::MXFP4 => b[0] = 121,
            GgmlType::NVFP4 => b[..4].fill(0x20),
            GgmlType::IQ1_M => {
                // the f16 scale sits in the top nibbles of the four scale words
                let bits = u16::from_le_bytes(d);
                for w in 0..4 {
                    let hi = &mut b[48 + 2 * w + 1];
                    *hi = (*hi & 0x0f) | ((((bits >> (4 * w)) & 0x0f) as u8) << 4);
                }
            }
            _ => b[..2].copy_from_slice(&d),
        }
    }
    bytes
}
