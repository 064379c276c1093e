//! Where a forward pass spends its time: [`PhaseTimes`], filled by [`crate::Llama`] when
//! profiling is on ([`crate::Llama::set_profiling`]).
//!
//! Candle's CPU operations run to completion before they return, so wall-clock time around
//! each group of operations is that group's time; what is left of a pass (the embedding
//! lookup, narrowing, the causal mask, allocation between the timed groups) is
//! [`PhaseTimes::rest`].

use std::time::{Duration, Instant};

/// What a timed group of operations does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Every weight matrix product (qrepack's or candle's), the output head included, with its
    /// bias.
    Products,
    /// Attention: the KV cache append, the scores, the mask, the softmax and the weighted sum
    /// of the values, with their reshapes.
    Attention,
    /// Norms, RoPE (with the head reshapes and the query scale), the gated activation and the
    /// residual adds.
    Elementwise,
}

/// Time per phase, summed over the passes since the last [`crate::Llama::take_profile`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PhaseTimes {
    /// Forward passes measured.
    pub passes: usize,
    /// Wall-clock time of the passes.
    pub total: Duration,
    /// [`Phase::Products`].
    pub products: Duration,
    /// [`Phase::Attention`].
    pub attention: Duration,
    /// [`Phase::Elementwise`].
    pub elementwise: Duration,
}

impl PhaseTimes {
    /// The time of the passes outside the three phases.
    pub fn rest(&self) -> Duration {
        self.total
            .saturating_sub(self.products + self.attention + self.elementwise)
    }

    /// Adds `d` to `phase`.
    pub fn add(&mut self, phase: Phase, d: Duration) {
        match phase {
            Phase::Products => self.products += d,
            Phase::Attention => self.attention += d,
            Phase::Elementwise => self.elementwise += d,
        }
    }
}

/// Runs `f`, adding its time to `phase` of `times` when profiling (`times` is `Some`).
pub(crate) fn timed<T>(
    times: &mut Option<PhaseTimes>,
    phase: Phase,
    f: impl FnOnce() -> candle_core::Result<T>,
) -> candle_core::Result<T> {
    match times {
        None => f(),
        Some(t) => {
            let start = Instant::now();
            let out = f();
            t.add(phase, start.elapsed());
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rest_is_what_the_phases_leave() {
        let mut t = PhaseTimes {
            total: Duration::from_millis(10),
            ..PhaseTimes::default()
        };
        t.add(Phase::Products, Duration::from_millis(6));
        t.add(Phase::Attention, Duration::from_millis(1));
        t.add(Phase::Elementwise, Duration::from_millis(2));
        assert_eq!(t.rest(), Duration::from_millis(1));
        t.add(Phase::Products, Duration::from_millis(5));
        assert_eq!(t.rest(), Duration::ZERO);
    }

    #[test]
    fn timed_only_counts_when_on() {
        let mut off = None;
        assert_eq!(timed(&mut off, Phase::Attention, || Ok(3)).unwrap(), 3);
        assert!(off.is_none());
        let mut on = Some(PhaseTimes::default());
        timed(&mut on, Phase::Attention, || {
            std::thread::sleep(Duration::from_millis(2));
            Ok(())
        })
        .unwrap();
        let t = on.unwrap();
        assert!(t.attention >= Duration::from_millis(2));
        assert_eq!(t.products, Duration::ZERO);
    }
}
