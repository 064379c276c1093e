//! Where the time of a matrix product goes: activation quantization, the parallel kernel
//! section (split into the kernels' own work and the scheduling around it), which includes
//! storing the results into the output rows.
//!
//! Profiling is off by default and then costs one relaxed atomic load per phase. While it is
//! on, every [`QMatrix::matmul`](crate::QMatrix::matmul) on any thread adds its phase times to
//! process-wide totals, so profile one kind of call at a time.
//!
//! ```
//! use qrepack::{profile, quantize, GgmlType, QMatrix};
//! let (rows, cols) = (64, 256);
//! let w: Vec<f32> = (0..rows * cols).map(|i| (i % 7) as f32 - 3.0).collect();
//! let m = QMatrix::new(GgmlType::Q4_0, rows, cols, &quantize(GgmlType::Q4_0, &w, rows, cols)?)?;
//! let (x, mut y) = (vec![0.25f32; 8 * cols], vec![0.0f32; 8 * rows]);
//!
//! profile::start();
//! for _ in 0..10 {
//!     m.matmul(&x, 8, &mut y)?;
//! }
//! let p = profile::stop();
//! assert_eq!(p.calls, 10);
//! assert!(p.per_call(p.total) >= p.per_call(p.kernel_wall));
//! # Ok::<(), qrepack::Error>(())
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Nanosecond totals, indexed by [`Phase`].
static TOTALS: [AtomicU64; PHASES] = [const { AtomicU64::new(0) }; PHASES];
/// Task time per rayon worker (the last slot also takes threads outside the pool and workers
/// beyond it), for the busiest thread's share.
static BUSY_BY_THREAD: [AtomicU64; THREAD_SLOTS] = [const { AtomicU64::new(0) }; THREAD_SLOTS];
const THREAD_SLOTS: usize = 64;
static CALLS: AtomicU64 = AtomicU64::new(0);
static TASKS: AtomicU64 = AtomicU64::new(0);

const PHASES: usize = 4;

/// The parts of one product that are timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Whole call, wall clock.
    Total,
    /// Activation quantization, wall clock.
    Quantize,
    /// The parallel section that runs the kernels, wall clock.
    KernelWall,
    /// Sum over tasks (all threads) of the time spent inside them.
    TaskBusy,
}

/// Per-phase totals of the products run while profiling was on.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PhaseTimes {
    /// Products timed.
    pub calls: u64,
    /// Rayon tasks (pieces of the kernel section) run.
    pub tasks: u64,
    /// Whole products, wall clock.
    pub total: Duration,
    /// Quantizing the activations, wall clock.
    pub quantize: Duration,
    /// The kernel section, wall clock: from handing out the first task to the last one's end.
    pub kernel_wall: Duration,
    /// Time inside the kernel tasks, summed over all threads.
    pub task_busy: Duration,
    /// Time inside the kernel tasks of the thread that spent the most there.
    pub busiest_thread: Duration,
}

impl PhaseTimes {
    /// `d` averaged over the timed calls.
    pub fn per_call(&self, d: Duration) -> Duration {
        if self.calls == 0 {
            Duration::ZERO
        } else {
            d / self.calls as u32
        }
    }

    /// Kernel-section time in which the busiest thread ran no task: waking workers, handing
    /// out and joining tasks. (The other threads' idle time is imbalance, [`Self::imbalance`].)
    pub fn scheduling(&self) -> Duration {
        self.kernel_wall.saturating_sub(self.busiest_thread)
    }

    /// How much longer the busiest thread worked than the mean of `threads` threads.
    pub fn imbalance(&self, threads: usize) -> Duration {
        self.busiest_thread
            .saturating_sub(self.task_busy / threads.max(1) as u32)
    }

    /// Time outside the two timed phases: argument checks, scratch.
    pub fn other(&self) -> Duration {
        self.total.saturating_sub(self.quantize + self.kernel_wall)
    }
}

/// Clears the totals and starts adding every product's phase times to them.
pub fn start() {
    for t in &TOTALS {
        t.store(0, Ordering::Relaxed);
    }
    for t in &BUSY_BY_THREAD {
        t.store(0, Ordering::Relaxed);
    }
    CALLS.store(0, Ordering::Relaxed);
    TASKS.store(0, Ordering::Relaxed);
    ENABLED.store(true, Ordering::Release);
}

/// Stops profiling and returns the totals since [`start`].
pub fn stop() -> PhaseTimes {
    ENABLED.store(false, Ordering::Release);
    let ns = |p: Phase| Duration::from_nanos(TOTALS[p as usize].load(Ordering::Relaxed));
    PhaseTimes {
        calls: CALLS.load(Ordering::Relaxed),
        tasks: TASKS.load(Ordering::Relaxed),
        total: ns(Phase::Total),
        quantize: ns(Phase::Quantize),
        kernel_wall: ns(Phase::KernelWall),
        task_busy: ns(Phase::TaskBusy),
        busiest_thread: BUSY_BY_THREAD
            .iter()
            .map(|t| Duration::from_nanos(t.load(Ordering::Relaxed)))
            .max()
            .unwrap_or_default(),
    }
}

/// A running phase timer: `None` (and free) while profiling is off.
#[derive(Clone, Copy)]
pub(crate) struct Timer(Option<Instant>);

impl Timer {
    #[inline]
    pub(crate) fn begin() -> Timer {
        Timer(ENABLED.load(Ordering::Relaxed).then(Instant::now))
    }

    /// Adds the time since [`Timer::begin`] to `phase`.
    #[inline]
    pub(crate) fn end(self, phase: Phase) {
        if let Some(t0) = self.0 {
            let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
            TOTALS[phase as usize].fetch_add(ns, Ordering::Relaxed);
            match phase {
                Phase::Total => {
                    CALLS.fetch_add(1, Ordering::Relaxed);
                }
                Phase::TaskBusy => {
                    TASKS.fetch_add(1, Ordering::Relaxed);
                    let slot = rayon::current_thread_index()
                        .map_or(THREAD_SLOTS - 1, |i| i.min(THREAD_SLOTS - 1));
                    BUSY_BY_THREAD[slot].fetch_add(ns, Ordering::Relaxed);
                }
                _ => {}
            }
        }
    }
}
