//! Instruction-set levels with their own kernels ([`KernelSet`]) and what this CPU can run
//! ([`CpuFeatures`]), detected once per process and optionally capped by `QREPACK_ISA`.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use crate::error::Error;

/// The CPU architecture a [`KernelSet`] belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Runs everywhere.
    Portable,
    /// x86-64.
    X86_64,
    /// AArch64 (ARMv8-A and later).
    Aarch64,
}

macro_rules! kernel_sets {
    ($( $(#[$m:meta])* $variant:ident = $name:literal, $arch:ident, $rank:literal, $features:literal; )*) => {
        /// An instruction-set level that has kernels of its own: one folder under `src/kernels`
        /// and one column of the selection table. Within an architecture, a higher level is tried
        /// first; `scalar` is the portable fallback every CPU has.
        ///
        /// ```
        /// use qrepack::cpu::KernelSet;
        /// let set: KernelSet = "avx2".parse().unwrap();
        /// assert_eq!(set, KernelSet::Avx2);
        /// assert_eq!(set.to_string(), "avx2");
        /// assert!("sse9".parse::<KernelSet>().is_err());
        /// ```
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum KernelSet {
            $( $(#[$m])* $variant, )*
        }

        impl KernelSet {
            /// Every set, best first within each architecture.
            pub const ALL: &'static [KernelSet] = &[$(KernelSet::$variant),*];

            /// The name `QREPACK_ISA`, `qrepack bench --isa` and the reports use.
            pub const fn name(self) -> &'static str {
                match self { $(KernelSet::$variant => $name,)* }
            }

            /// The architecture the set runs on.
            pub const fn arch(self) -> Arch {
                match self { $(KernelSet::$variant => Arch::$arch,)* }
            }

            /// Order within the architecture: a higher rank is tried first.
            pub const fn rank(self) -> u8 {
                match self { $(KernelSet::$variant => $rank,)* }
            }

            /// The CPU features the set needs, as the OS names them.
            pub const fn features(self) -> &'static str {
                match self { $(KernelSet::$variant => $features,)* }
            }

            const fn bit(self) -> u16 {
                1 << (self as u16)
            }
        }
    };
}

kernel_sets! {
    /// Portable Rust, the reference and the fallback.
    Scalar = "scalar", Portable, 0, "";
    /// AVX2 with FMA and F16C (Haswell, Zen).
    Avx2 = "avx2", X86_64, 1, "avx2+fma+f16c";
    /// AVX2 plus VEX-encoded `vpdpbusd` (Alder Lake, Sapphire Rapids).
    AvxVnni = "avxvnni", X86_64, 2, "avx2+fma+f16c+avxvnni";
    /// AVX-512 F, BW, VL and VNNI with AVX2 (Ice Lake, Sapphire Rapids, Zen 4).
    Avx512 = "avx512", X86_64, 3, "avx2+fma+f16c+avx512f+avx512bw+avx512vl+avx512vnni";
    /// AVX-512 with the BF16 dot product `vdpbf16ps` (Cooper Lake, Sapphire Rapids, Zen 4).
    Avx512Bf16 = "avx512bf16", X86_64, 4, "avx2+fma+f16c+avx512f+avx512bw+avx512vl+avx512vnni+avx512bf16";
    /// NEON (Advanced SIMD), which every AArch64 CPU has.
    Neon = "neon", Aarch64, 1, "neon";
    /// NEON with the `sdot`/`udot` dot products (Cortex-A76, Neoverse N1, Apple M1).
    Dotprod = "dotprod", Aarch64, 2, "neon+dotprod";
    /// NEON with dot products and the `smmla` int8 matrix multiply (Neoverse V1/N2, Apple M2).
    I8mm = "i8mm", Aarch64, 3, "neon+dotprod+i8mm";
    /// SVE with i8mm and a 256-bit vector length (Neoverse V1, Graviton 3): ggml's SVE kernels
    /// need exactly 32-byte vectors, so other SVE lengths keep the i8mm/dotprod sets.
    Sve = "sve", Aarch64, 4, "neon+dotprod+i8mm+sve (256-bit)";
}

impl fmt::Display for KernelSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KernelSet {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let s = s.trim();
        KernelSet::ALL
            .iter()
            .copied()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = KernelSet::ALL.iter().map(|k| k.name()).collect();
                Error::Invalid(format!(
                    "unknown instruction set '{s}' (known: {})",
                    names.join(", ")
                ))
            })
    }
}

/// The kernel sets this CPU may run, detected once.
///
/// The fields are private: a value only comes from detection ([`CpuFeatures::get`],
/// [`CpuFeatures::detect`]), from the portable subset ([`CpuFeatures::scalar`]) or from removing
/// sets ([`CpuFeatures::capped`]), so kernels are never selected for a CPU that lacks them.
///
/// ```
/// use qrepack::cpu::{CpuFeatures, KernelSet};
/// let cpu = CpuFeatures::detect();
/// assert!(cpu.has(KernelSet::Scalar));
/// let capped = cpu.capped(KernelSet::Avx2);
/// assert!(!capped.has(KernelSet::Avx512));
/// assert_eq!(capped.has(KernelSet::Avx2), cpu.has(KernelSet::Avx2));
/// assert_eq!(CpuFeatures::scalar().best(), KernelSet::Scalar);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuFeatures {
    /// One bit per [`KernelSet`] the CPU may run.
    sets: u16,
    /// The cap applied to the detected sets, if any.
    cap: Option<KernelSet>,
}

/// The environment variable that caps the kernel sets (`QREPACK_ISA=avx2`).
pub const ISA_ENV: &str = "QREPACK_ISA";
/// The older switch, an alias of `QREPACK_ISA=scalar` when set to anything but `0`.
pub const FORCE_SCALAR_ENV: &str = "QREPACK_FORCE_SCALAR";

impl CpuFeatures {
    /// The features of this CPU, capped by `QREPACK_ISA` / `QREPACK_FORCE_SCALAR` (read once).
    ///
    /// An unknown `QREPACK_ISA` value is an error, and every constructor of the library that
    /// chooses kernels ([`crate::QMatrix::new`], [`crate::Model::open`], ...) reports it.
    pub fn try_get() -> Result<&'static CpuFeatures, Error> {
        static FEATURES: OnceLock<Result<CpuFeatures, Error>> = OnceLock::new();
        FEATURES
            .get_or_init(|| Ok(CpuFeatures::detect().capped_by(env_cap()?)))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// As [`CpuFeatures::try_get`], but an unknown `QREPACK_ISA` value gives the portable
    /// subset (the constructors that choose kernels report the error instead).
    pub fn get() -> &'static CpuFeatures {
        static SCALAR: CpuFeatures = CpuFeatures::scalar();
        CpuFeatures::try_get().unwrap_or(&SCALAR)
    }

    /// Everything this CPU has, ignoring the environment.
    pub fn detect() -> CpuFeatures {
        CpuFeatures {
            sets: detect_sets(),
            cap: None,
        }
    }

    /// No SIMD at all: the portable kernels.
    pub const fn scalar() -> CpuFeatures {
        CpuFeatures {
            sets: KernelSet::Scalar.bit(),
            cap: Some(KernelSet::Scalar),
        }
    }

    /// These features without the sets above `max` (other architectures' sets and, within
    /// `max`'s architecture, the sets of a higher rank). `capped(KernelSet::Scalar)` is
    /// [`CpuFeatures::scalar`]. A subset of what the CPU has, so still safe to select for:
    /// tests use it to run every set the CPU has, benchmarks to measure a lower set.
    pub fn capped(&self, max: KernelSet) -> CpuFeatures {
        let mut sets = KernelSet::Scalar.bit();
        for &k in KernelSet::ALL {
            if self.has(k) && k.arch() == max.arch() && k.rank() <= max.rank() {
                sets |= k.bit();
            }
        }
        CpuFeatures {
            sets,
            cap: Some(max),
        }
    }

    fn capped_by(self, cap: Option<KernelSet>) -> CpuFeatures {
        match cap {
            Some(max) => self.capped(max),
            None => self,
        }
    }

    /// True when kernels of `set` may run here.
    #[inline]
    pub fn has(&self, set: KernelSet) -> bool {
        self.sets & set.bit() != 0
    }

    /// The sets this CPU may run, in the order kernels are looked for: best first, `scalar`
    /// last.
    pub fn sets(&self) -> impl Iterator<Item = KernelSet> + '_ {
        let mut v: Vec<KernelSet> = KernelSet::ALL
            .iter()
            .copied()
            .filter(|k| self.has(*k))
            .collect();
        v.sort_by_key(|k| std::cmp::Reverse(k.rank()));
        v.into_iter()
    }

    /// The highest-ranked set this CPU may run.
    pub fn best(&self) -> KernelSet {
        self.sets().next().unwrap_or(KernelSet::Scalar)
    }

    /// The cap that was applied (`QREPACK_ISA`, [`CpuFeatures::capped`]), if any.
    pub fn cap(&self) -> Option<KernelSet> {
        self.cap
    }

    /// True when only the portable kernels may run.
    pub fn force_scalar(&self) -> bool {
        self.best() == KernelSet::Scalar
    }

    /// Short human-readable summary: the sets, best first, e.g. `avx512,avx2,scalar`.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.sets().map(KernelSet::name).collect();
        names.join(",")
    }
}

/// The SVE vector length of this CPU in bits (128..=2048), or `None` without SVE (and on other
/// architectures). Reported by `qrepack info`. The `sve` kernel set needs [`SVE_SET_BITS`]
/// (as ggml's SVE repack kernels do); an SVE CPU with another length runs the NEON sets.
///
/// ```
/// let bits = qrepack::cpu::sve_vector_bits();
/// assert!(bits.is_none_or(|b| b % 128 == 0 && (128..=2048).contains(&b)));
/// ```
pub fn sve_vector_bits() -> Option<u32> {
    static SVE: OnceLock<Option<u32>> = OnceLock::new();
    *SVE.get_or_init(detect_sve)
}

/// The only SVE vector length, in bits, for which the `sve` kernel set is available: the kernels
/// hold one 8-row block column in four vectors (ggml's `ggml_cpu_get_sve_cnt() == QK8_0`).
pub const SVE_SET_BITS: u32 = 256;

#[cfg(target_arch = "aarch64")]
fn detect_sve() -> Option<u32> {
    if !std::arch::is_aarch64_feature_detected!("sve") {
        return None;
    }
    let bytes: u64;
    // SAFETY: `rdvl x0, #1` (encoded with `.inst`, so no assembler SVE support is needed) only
    // writes the vector length in bytes to x0; it runs only after the OS reported SVE, so it
    // cannot trap, and it touches no memory, stack or flags.
    unsafe {
        std::arch::asm!(
            ".inst 0x04bf5020",
            out("x0") bytes,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    u32::try_from(bytes * 8).ok()
}

#[cfg(not(target_arch = "aarch64"))]
fn detect_sve() -> Option<u32> {
    None
}

/// The cap the environment asks for, if any.
fn env_cap() -> Result<Option<KernelSet>, Error> {
    if let Ok(v) = std::env::var(ISA_ENV) {
        if !v.trim().is_empty() {
            return v.parse::<KernelSet>().map(Some).map_err(|e| match e {
                Error::Invalid(msg) => Error::Invalid(format!("{ISA_ENV}: {msg}")),
                other => other,
            });
        }
    }
    let force_scalar = std::env::var(FORCE_SCALAR_ENV)
        .map(|v| !v.is_empty() && v != "0")
        .unwrap_or(false);
    Ok(force_scalar.then_some(KernelSet::Scalar))
}

#[cfg(target_arch = "x86_64")]
fn detect_sets() -> u16 {
    let avx2 = is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    let avxvnni = avx2 && is_x86_feature_detected!("avxvnni");
    let avx512 = avx2
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni");
    let avx512bf16 = avx512 && is_x86_feature_detected!("avx512bf16");
    let mut sets = KernelSet::Scalar.bit();
    for (on, set) in [
        (avx2, KernelSet::Avx2),
        (avxvnni, KernelSet::AvxVnni),
        (avx512, KernelSet::Avx512),
        (avx512bf16, KernelSet::Avx512Bf16),
    ] {
        if on {
            sets |= set.bit();
        }
    }
    sets
}

#[cfg(target_arch = "aarch64")]
fn detect_sets() -> u16 {
    use std::arch::is_aarch64_feature_detected;
    let neon = is_aarch64_feature_detected!("neon");
    let dotprod = neon && is_aarch64_feature_detected!("dotprod");
    let i8mm = dotprod && is_aarch64_feature_detected!("i8mm");
    // The vector length is read (`rdvl`) only once the OS reported SVE.
    let sve = i8mm && sve_vector_bits() == Some(SVE_SET_BITS);
    let mut sets = KernelSet::Scalar.bit();
    for (on, set) in [
        (neon, KernelSet::Neon),
        (dotprod, KernelSet::Dotprod),
        (i8mm, KernelSet::I8mm),
        (sve, KernelSet::Sve),
    ] {
        if on {
            sets |= set.bit();
        }
    }
    sets
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect_sets() -> u16 {
    KernelSet::Scalar.bit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_remove_higher_and_foreign_sets() {
        let all = CpuFeatures {
            sets: KernelSet::ALL.iter().fold(0, |s, k| s | k.bit()),
            cap: None,
        };
        let avx2 = all.capped(KernelSet::Avx2);
        assert_eq!(
            avx2.sets().collect::<Vec<_>>(),
            vec![KernelSet::Avx2, KernelSet::Scalar]
        );
        let vnni = all.capped(KernelSet::AvxVnni);
        assert!(vnni.has(KernelSet::AvxVnni) && !vnni.has(KernelSet::Avx512));
        let dot = all.capped(KernelSet::Dotprod);
        assert_eq!(
            dot.sets().collect::<Vec<_>>(),
            vec![KernelSet::Dotprod, KernelSet::Neon, KernelSet::Scalar]
        );
        assert_eq!(all.capped(KernelSet::Scalar).best(), KernelSet::Scalar);
        // A cap never adds what the CPU lacks.
        let none = CpuFeatures::scalar().capped(KernelSet::Avx512);
        assert_eq!(none.best(), KernelSet::Scalar);
    }

    #[test]
    fn names_round_trip() {
        for &k in KernelSet::ALL {
            assert_eq!(k.name().parse::<KernelSet>().unwrap(), k);
            assert_eq!(
                k.to_string().to_uppercase().parse::<KernelSet>().unwrap(),
                k
            );
        }
        let err = "bogus".parse::<KernelSet>().unwrap_err().to_string();
        assert!(err.contains("bogus") && err.contains("avx2"), "{err}");
    }
}
