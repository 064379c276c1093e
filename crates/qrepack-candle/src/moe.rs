//! The mixture-of-experts feed-forward layer (Qwen3-MoE, OLMoE, Mixtral, gpt-oss), as
//! llama.cpp's `build_moe_ffn` computes it, on raw f32 buffers.
//!
//! For the `rows` normed rows of a pass:
//!
//! 1. the router, one product `ffn_gate_inp x` (plus its bias) for every row: a logit per
//!    expert;
//! 2. per row, the `k` largest logits (the first on ties) and their weights
//!    ([`Gating`]): the softmax over all experts read at them, or the softmax over them alone;
//!    divided by their sum (clamped below at 2^-14, as llama.cpp) when the model
//!    renormalizes, then scaled;
//! 3. gate and up of the chosen experts for every row at once
//!    ([`QExperts::matmul_id`](qrepack::QExperts::matmul_id) with the row shared by its `k`
//!    experts: each expert multiplies all the rows routed to it in one product), each chosen
//!    expert's bias when it has one, the gated activation, and down (one input row per
//!    chosen expert, plus its bias);
//! 4. per row, the `k` outputs times their weights, summed in the order of the choice.
//!
//! Every buffer lives in [`MoeScratch`], sized once per batch shape like the dense path's.

use candle_core::{bail, Result};
use rayon::prelude::*;

use crate::config::Gating;
use crate::decoder::{sized, Linear};
use crate::linear::QExpertsLinear;
use crate::ops::{self, Gate};
use crate::profile::{timed, Phase, PhaseTimes};

/// Rows of the routing and the weighted sum below which they run on the calling thread.
const PARALLEL_ROWS: usize = 32;

/// llama.cpp's floor on the sum of the chosen weights before dividing by it (the smallest
/// normal f16).
const MIN_WEIGHT_SUM: f32 = 1.0 / 16384.0;

/// One expert tensor of a layer (gate, up or down of every expert).
#[derive(Clone, Debug)]
pub(crate) enum Experts {
    /// A 3-D tensor through qrepack's routed product.
    Qrepack(QExpertsLinear),
    /// One matrix per expert, each multiplying the rows routed to it: candle's `QMatMul` (the
    /// comparison backend), or the 2-D tensors of the first Mixtral files
    /// (`blk.N.ffn_gate.E.weight`).
    Separate {
        experts: Vec<Linear>,
        rows: usize,
        cols: usize,
    },
}

impl Experts {
    pub fn n_expert(&self) -> usize {
        match self {
            Experts::Qrepack(e) => e.experts().n_expert(),
            Experts::Separate { experts, .. } => experts.len(),
        }
    }

    /// Output width of one expert.
    pub fn rows(&self) -> usize {
        match self {
            Experts::Qrepack(e) => e.experts().rows(),
            Experts::Separate { rows, .. } => *rows,
        }
    }

    /// Input width of one expert.
    pub fn cols(&self) -> usize {
        match self {
            Experts::Qrepack(e) => e.experts().cols(),
            Experts::Separate { cols, .. } => *cols,
        }
    }

    /// [`QExperts::matmul_id`](qrepack::QExperts::matmul_id): `ids` holds `n_used` experts per
    /// token, `x` one row per token (`x_rows` 1) or one per chosen expert (`x_rows ==
    /// n_used`), `y` one row per chosen expert.
    fn forward_id(
        &self,
        x: &[f32],
        x_rows: usize,
        ids: &[i32],
        n_used: usize,
        y: &mut [f32],
    ) -> Result<()> {
        match self {
            Experts::Qrepack(e) => e
                .experts()
                .matmul_id(x, x_rows, ids, n_used, y)
                .map_err(candle_core::Error::wrap),
            Experts::Separate {
                experts,
                rows,
                cols,
            } => {
                let (rows, cols) = (*rows, *cols);
                if y.len() != ids.len() * rows || x.len() != ids.len() / n_used * x_rows * cols {
                    bail!("the routed product's buffers do not fit {} ids", ids.len());
                }
                if ids
                    .iter()
                    .any(|&id| usize::try_from(id).map_or(true, |e| e >= experts.len()))
                {
                    bail!("an expert id is outside 0..{}", experts.len());
                }
                // the slots of each expert gathered, multiplied together, scattered back
                for (e, m) in experts.iter().enumerate() {
                    let slots: Vec<usize> = (0..ids.len())
                        .filter(|&s| usize::try_from(ids[s]) == Ok(e))
                        .collect();
                    if slots.is_empty() {
                        continue;
                    }
                    let mut xe = Vec::with_capacity(slots.len() * cols);
                    for &s in &slots {
                        let row = s / n_used * x_rows + (s % n_used) % x_rows;
                        xe.extend_from_slice(&x[row * cols..][..cols]);
                    }
                    let mut out = vec![0.0; slots.len() * rows];
                    m.forward_into(&xe, slots.len(), &mut out)?;
                    for (i, &s) in slots.iter().enumerate() {
                        y[s * rows..][..rows].copy_from_slice(&out[i * rows..][..rows]);
                    }
                }
                Ok(())
            }
        }
    }
}

/// A mixture-of-experts feed-forward layer.
#[derive(Clone, Debug)]
pub(crate) struct MoeFfn {
    /// `n_expert x n_embd`: a logit per expert.
    pub router: Linear,
    /// `n_ff x n_embd` per expert.
    pub gate: Experts,
    pub up: Experts,
    /// `n_embd x n_ff` per expert.
    pub down: Experts,
    /// Experts per row.
    pub n_used: usize,
    /// Divide the chosen weights by their sum.
    pub norm_weights: bool,
    /// Factor on the weights.
    pub weights_scale: f32,
    /// How the weights come from the logits.
    pub gating: Gating,
    /// Per-expert biases of gate, up and down (`n_expert` rows of each one's output width;
    /// gpt-oss).
    pub biases: ExpertBiases,
}

/// The biases of a mixture's experts, one row per expert, when the model has them.
#[derive(Clone, Debug, Default)]
pub(crate) struct ExpertBiases {
    pub gate: Option<Vec<f32>>,
    pub up: Option<Vec<f32>>,
    pub down: Option<Vec<f32>>,
}

/// The buffers of the mixture of experts for one batch shape.
#[derive(Clone, Debug, Default)]
pub(crate) struct MoeScratch {
    /// Router logits, `n_expert` per row.
    logits: Vec<f32>,
    /// The chosen experts, `k` per row, most probable first.
    ids: Vec<i32>,
    /// Their weights.
    weights: Vec<f32>,
    /// Gate, up and the gated activation: `n_ff` per chosen expert.
    gate: Vec<f32>,
    up: Vec<f32>,
    act: Vec<f32>,
    /// The chosen experts' outputs: `n_embd` each.
    down: Vec<f32>,
}

impl MoeScratch {
    /// Bytes its buffers hold.
    pub fn held_bytes(&self) -> usize {
        4 * (self.logits.capacity()
            + self.ids.capacity()
            + self.weights.capacity()
            + self.gate.capacity()
            + self.up.capacity()
            + self.act.capacity()
            + self.down.capacity())
    }
}

impl MoeFfn {
    /// Experts of the layer.
    pub fn n_expert(&self) -> usize {
        self.router.rows()
    }

    /// Width of one expert's feed-forward layer.
    pub fn n_ff(&self) -> usize {
        self.gate.rows()
    }

    /// The layer's output for the `rows` normed rows of `h` (`n_embd` each), into `out`.
    pub fn forward(
        &self,
        h: &[f32],
        rows: usize,
        act: Gate,
        s: &mut MoeScratch,
        out: &mut [f32],
        prof: &mut Option<PhaseTimes>,
    ) -> Result<()> {
        let (n_expert, k, ff) = (self.n_expert(), self.n_used, self.n_ff());
        let n_embd = self.down.rows();
        timed(prof, Phase::Products, || {
            self.router
                .forward_into(h, rows, sized(&mut s.logits, rows * n_expert))
        })?;
        timed(prof, Phase::Elementwise, || {
            route(
                &s.logits,
                n_expert,
                (self.gating, self.norm_weights, self.weights_scale),
                sized(&mut s.ids, rows * k),
                sized(&mut s.weights, rows * k),
            );
            Ok(())
        })?;
        timed(prof, Phase::Products, || {
            let n = rows * k * ff;
            self.gate
                .forward_id(h, 1, &s.ids, k, sized(&mut s.gate, n))?;
            self.up.forward_id(h, 1, &s.ids, k, sized(&mut s.up, n))
        })?;
        timed(prof, Phase::Elementwise, || {
            add_expert_bias(&mut s.gate, ff, &s.ids, self.biases.gate.as_deref());
            add_expert_bias(&mut s.up, ff, &s.ids, self.biases.up.as_deref());
            let a = sized(&mut s.act, rows * k * ff);
            ops::gated_split(act, &s.gate, &s.up, a, ff);
            Ok(())
        })?;
        timed(prof, Phase::Products, || {
            self.down
                .forward_id(&s.act, k, &s.ids, k, sized(&mut s.down, rows * k * n_embd))
        })?;
        timed(prof, Phase::Elementwise, || {
            add_expert_bias(&mut s.down, n_embd, &s.ids, self.biases.down.as_deref());
            weighted_sum(&s.down, &s.weights, k, &mut out[..rows * n_embd]);
            Ok(())
        })
    }
}

/// Adds to each chosen expert's output row (`width` wide, one per entry of `ids`) that
/// expert's bias row, when there are biases.
fn add_expert_bias(y: &mut [f32], width: usize, ids: &[i32], bias: Option<&[f32]>) {
    let Some(bias) = bias else { return };
    for (row, &id) in y.chunks_exact_mut(width).zip(ids) {
        // the ids come from `route`, within the experts the load checked the biases against
        let b = &bias[id as usize * width..][..width];
        row.iter_mut().zip(b).for_each(|(y, b)| *y += b);
    }
}

/// Per row of `logits` (`n_expert` wide): the `ids.len() / rows` most probable experts, most
/// probable first, into `ids`, and their weights into `weights` by `(gating, renormalize,
/// scale)`.
pub(crate) fn route(
    logits: &[f32],
    n_expert: usize,
    (gating, norm, scale): (Gating, bool, f32),
    ids: &mut [i32],
    weights: &mut [f32],
) {
    let rows = logits.len() / n_expert;
    let k = ids.len() / rows.max(1);
    if rows == 0 || k == 0 {
        return;
    }
    let one = |(l, (id, w)): (&[f32], (&mut [i32], &mut [f32]))| {
        route_row(l, (gating, norm, scale), id, w)
    };
    if rows < PARALLEL_ROWS {
        logits
            .chunks_exact(n_expert)
            .zip(ids.chunks_exact_mut(k).zip(weights.chunks_exact_mut(k)))
            .for_each(one);
    } else {
        logits
            .par_chunks_exact(n_expert)
            .zip(
                ids.par_chunks_exact_mut(k)
                    .zip(weights.par_chunks_exact_mut(k)),
            )
            .with_min_len(PARALLEL_ROWS / 2)
            .for_each(one);
    }
}

/// One row of [`route`]. The softmax is monotonic, so the top `k` are taken on the logits: a
/// sorted list of `k` kept by insertion, where only a strictly larger logit displaces an
/// earlier expert (ties go to the lower index; NaN logits rank below every number).
fn route_row(
    logits: &[f32],
    (gating, norm, scale): (Gating, bool, f32),
    ids: &mut [i32],
    weights: &mut [f32],
) {
    let k = ids.len();
    ids.fill(-1);
    for (e, &v) in logits.iter().enumerate() {
        let v = if v.is_nan() { f32::NEG_INFINITY } else { v };
        // first place whose expert is less probable (or that is still empty)
        let Some(p) = (0..k).find(|&j| ids[j] < 0 || v > weights[j]) else {
            continue;
        };
        ids.copy_within(p..k - 1, p + 1);
        weights.copy_within(p..k - 1, p + 1);
        ids[p] = e as i32;
        weights[p] = v;
    }
    // the softmax over every expert, or over the chosen ones (their logits, in `weights`)
    let over = match gating {
        Gating::Softmax => logits,
        Gating::SoftmaxOfChosen => &*weights,
    };
    let max = over.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = over.iter().map(|&v| (v - max).exp()).sum();
    for (w, &id) in weights.iter_mut().zip(ids.iter()) {
        // every place is filled when k <= n_expert, which the model checks at load
        *w = usize::try_from(id).map_or(0.0, |e| (logits[e] - max).exp() / sum);
    }
    if norm {
        let total = weights.iter().sum::<f32>().max(MIN_WEIGHT_SUM);
        weights.iter_mut().for_each(|w| *w /= total);
    }
    if scale != 1.0 {
        weights.iter_mut().for_each(|w| *w *= scale);
    }
}

/// `out[r] = sum_j weights[r][j] * experts[r][j]` over the `k` chosen experts of each row, in
/// their order.
fn weighted_sum(experts: &[f32], weights: &[f32], k: usize, out: &mut [f32]) {
    let rows = weights.len() / k;
    if rows == 0 {
        return;
    }
    let width = out.len() / rows;
    let one = |(r, o): (usize, &mut [f32])| {
        let w = &weights[r * k..][..k];
        let e = &experts[r * k * width..][..k * width];
        for (i, o) in o.iter_mut().enumerate() {
            let mut acc = w[0] * e[i];
            for j in 1..k {
                acc += w[j] * e[j * width + i];
            }
            *o = acc;
        }
    };
    if rows < PARALLEL_ROWS {
        out.chunks_exact_mut(width).enumerate().for_each(one);
    } else {
        out.par_chunks_exact_mut(width)
            .enumerate()
            .with_min_len(PARALLEL_ROWS / 2)
            .for_each(one);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The routing against a plain f64 softmax and a sort.
    #[test]
    fn routing_matches_f64() {
        let (rows, n_expert, k) = (40, 16, 4);
        let logits: Vec<f32> = (0..rows * n_expert)
            .map(|i| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * 6.0)
            .collect();
        let cases = [
            (Gating::Softmax, true),
            (Gating::Softmax, false),
            (Gating::SoftmaxOfChosen, false),
        ];
        for (gating, norm) in cases {
            let (mut ids, mut w) = (vec![0; rows * k], vec![0.0; rows * k]);
            route(&logits, n_expert, (gating, norm, 0.5), &mut ids, &mut w);
            for r in 0..rows {
                let l: Vec<f64> = logits[r * n_expert..][..n_expert]
                    .iter()
                    .map(|&v| v as f64)
                    .collect();
                let max = l.iter().copied().fold(f64::MIN, f64::max);
                let sum: f64 = l.iter().map(|v| (v - max).exp()).sum();
                let mut order: Vec<usize> = (0..n_expert).collect();
                order.sort_by(|&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
                let top = &order[..k];
                let p: Vec<f64> = match gating {
                    Gating::Softmax => top.iter().map(|&e| (l[e] - max).exp() / sum).collect(),
                    Gating::SoftmaxOfChosen => {
                        let top_sum: f64 = top.iter().map(|&e| (l[e] - l[top[0]]).exp()).sum();
                        top.iter()
                            .map(|&e| (l[e] - l[top[0]]).exp() / top_sum)
                            .collect()
                    }
                };
                let total: f64 = if norm { p.iter().sum() } else { 1.0 };
                for j in 0..k {
                    assert_eq!(ids[r * k + j], top[j] as i32, "row {r}");
                    let want = p[j] / total * 0.5;
                    assert!((w[r * k + j] as f64 - want).abs() < 1e-6, "row {r}");
                }
            }
        }
    }

    /// Ties go to the lower index; NaN logits are chosen only when nothing else is left.
    #[test]
    fn routing_ties_and_nan() {
        let (mut ids, mut w) = (vec![0; 2], vec![0.0; 2]);
        let softmax = (Gating::Softmax, true, 1.0);
        route(&[1.0, 3.0, 3.0, 2.0], 4, softmax, &mut ids, &mut w);
        assert_eq!(ids, [1, 2]);
        assert!((w[0] - 0.5).abs() < 1e-6 && (w[1] - 0.5).abs() < 1e-6);
        route(&[f32::NAN, 1.0, f32::NAN], 3, softmax, &mut ids, &mut w);
        assert_eq!(ids[0], 1);
        assert!((0..3).contains(&ids[1]));
    }

    #[test]
    fn weighted_sums() {
        let (k, width) = (2, 3);
        let experts = [1.0, 2.0, 3.0, 10.0, 20.0, 30.0];
        let mut out = vec![0.0; width];
        weighted_sum(&experts, &[0.25, 0.5], k, &mut out);
        assert_eq!(out, [5.25, 10.5, 15.75]);
    }
}
