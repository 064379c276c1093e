//! CPU feature detection, done once per process.

use std::sync::OnceLock;

/// The instruction-set extensions qrepack's kernels can use, detected once.
///
/// The fields are private: a value can only come from detection ([`CpuFeatures::get`]) or be the
/// portable subset ([`CpuFeatures::scalar`]), so SIMD kernels are never selected for a CPU that
/// lacks them.
///
/// ```
/// let cpu = qrepack::cpu::CpuFeatures::get();
/// if cpu.force_scalar() { assert!(!cpu.avx2()) }
/// assert!(!qrepack::cpu::CpuFeatures::scalar().avx2());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    /// AVX2 together with FMA and F16C (the x86 kernel set).
    avx2: bool,
    /// AVX-512 BW.
    avx512bw: bool,
    /// AVX-512 VNNI (with F, BW and VL: 256-bit VNNI with 32 vector registers).
    avx512vnni: bool,
    /// AVX-VNNI (VEX-encoded).
    avxvnni: bool,
    /// `QREPACK_FORCE_SCALAR=1` was set: every SIMD flag above is off.
    force_scalar: bool,
}

impl CpuFeatures {
    /// The features of this CPU, honouring `QREPACK_FORCE_SCALAR` (read once).
    pub fn get() -> &'static CpuFeatures {
        static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
        FEATURES.get_or_init(|| {
            let force_scalar = std::env::var("QREPACK_FORCE_SCALAR")
                .map(|v| !v.is_empty() && v != "0")
                .unwrap_or(false);
            if force_scalar {
                CpuFeatures {
                    force_scalar,
                    ..Default::default()
                }
            } else {
                CpuFeatures::detect()
            }
        })
    }

    /// No SIMD at all: the portable kernels.
    pub const fn scalar() -> CpuFeatures {
        CpuFeatures {
            avx2: false,
            avx512bw: false,
            avx512vnni: false,
            avxvnni: false,
            force_scalar: true,
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn detect() -> CpuFeatures {
        CpuFeatures {
            avx2: is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c"),
            avx512bw: is_x86_feature_detected!("avx512bw"),
            avx512vnni: is_x86_feature_detected!("avx512vnni")
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl"),
            avxvnni: is_x86_feature_detected!("avxvnni"),
            force_scalar: false,
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn detect() -> CpuFeatures {
        CpuFeatures::default()
    }

    /// These features without AVX-512 (`no_avx512`) and/or without any VNNI (`no_vnni`): a
    /// subset of what the CPU has, so still safe to build kernels for. Tests use it to run
    /// every kernel family the CPU can execute, not only the fastest.
    ///
    /// ```
    /// let cpu = qrepack::cpu::CpuFeatures::get();
    /// let plain_avx2 = cpu.without(true, true);
    /// assert!(!plain_avx2.avx512vnni() && !plain_avx2.avxvnni());
    /// assert_eq!(plain_avx2.avx2(), cpu.avx2());
    /// ```
    pub fn without(&self, no_avx512: bool, no_vnni: bool) -> CpuFeatures {
        CpuFeatures {
            avx512bw: self.avx512bw && !no_avx512,
            avx512vnni: self.avx512vnni && !no_avx512 && !no_vnni,
            avxvnni: self.avxvnni && !no_vnni,
            ..*self
        }
    }

    /// AVX2 with FMA and F16C.
    pub fn avx2(&self) -> bool {
        self.avx2
    }
    /// AVX-512 BW.
    pub fn avx512bw(&self) -> bool {
        self.avx512bw
    }
    /// AVX-512 VNNI.
    pub fn avx512vnni(&self) -> bool {
        self.avx512vnni
    }
    /// AVX-VNNI.
    pub fn avxvnni(&self) -> bool {
        self.avxvnni
    }
    /// True when `QREPACK_FORCE_SCALAR` disabled SIMD (or for [`CpuFeatures::scalar`]).
    pub fn force_scalar(&self) -> bool {
        self.force_scalar
    }

    /// Short human-readable summary, e.g. `avx2` or `scalar`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.avx2 {
            parts.push("avx2+fma+f16c");
        }
        if self.avx512bw {
            parts.push("avx512bw");
        }
        if self.avx512vnni {
            parts.push("avx512vnni");
        }
        if self.avxvnni {
            parts.push("avxvnni");
        }
        if parts.is_empty() {
            "scalar".to_string()
        } else {
            parts.join(",")
        }
    }
}
