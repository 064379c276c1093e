//! The `bench` and `sweep` commands: their arguments turned into the benchmark plans of
//! [`crate::bench`], [`crate::sweep`] and [`crate::model_bench`], run on the `--threads` pool.

use super::*;

pub(super) fn bench_model(args: BenchArgs, model: PathBuf) -> Result<()> {
    let (pool, _) = pool(args.common.threads)?;
    let cfg = model_bench::ModelBench {
        path: &model,
        batches: if args.batch.is_empty() {
            bench::SUITE_BATCHES.to_vec()
        } else {
            args.batch
        },
        reps: args.reps,
        seed: args.seed,
        json: args.common.json,
        per_tensor: args.per_tensor,
        quiet: args.common.quiet,
        vs_ggml: args
            .vs
            .map(|VsEngine::Ggml| args.peer.clone().unwrap_or_else(vs_ggml::default_peer)),
        cold_mb: args.cold_mb,
    };
    let s = pool.install(|| model_bench::run(&cfg))?;
    out(&s)
}

pub(super) fn sweep(args: SweepArgs) -> Result<()> {
    let (rows, cols) = (args.rows.unwrap_or(4096), args.cols.unwrap_or(4096));
    let (pool, threads) = pool(args.common.threads)?;
    let cfg = sweep::Sweep {
        types: if args.types.is_empty() {
            sweep::default_types()
        } else {
            args.types
        },
        rows,
        cols,
        batches: if args.batch.is_empty() {
            sweep::SWEEP_BATCHES.to_vec()
        } else {
            args.batch
        },
        reps: match args.reps {
            Some(r) => Reps::Fixed(r),
            None => Reps::Adaptive {
                min_time: args.min_time.min(0.2),
                min: 3,
                max: 1000,
            },
        },
        seed: args.seed,
        quiet: args.common.quiet,
        ggml: args.vs.map(|VsEngine::Ggml| sweep::Peer {
            binary: args.peer.clone().unwrap_or_else(vs_ggml::default_peer),
            threads,
        }),
    };
    if let Some(p) = &cfg.ggml {
        vs_ggml::ensure_peer(&p.binary)?;
    }
    if rows.checked_mul(cols).is_none_or(|n| n > 1 << 30) {
        bail!("a {rows} x {cols} matrix is too large for the sweep");
    }
    let series = pool.install(|| sweep::run(&cfg))?;
    let title = format!(
        "{}: {rows}x{cols} matmul, {threads} thread(s), {}",
        if cfg.ggml.is_some() {
            "qrepack and ggml"
        } else {
            "qrepack"
        },
        CpuFeatures::get().describe()
    );
    if let Some(p) = &args.plot {
        sweep::write_svg(p, &series, &title)?;
        if !args.common.quiet {
            eprintln!("wrote {}", p.display());
        }
    }
    if args.common.json {
        let v = pool.install(|| sweep::to_json(&series, &cfg));
        out(&format!("{}\n", serde_json::to_string(&v)?))
    } else {
        out(&format!(
            "{title}: GFLOP/s by batch (median of timed reps, hot)\n\n{}",
            sweep::table(&series, &cfg.batches)
        ))
    }
}

pub(super) fn bench(args: BenchArgs) -> Result<()> {
    if let Some(model) = args.model.clone() {
        return bench_model(args, model);
    }
    if args.sweep {
        return sweep(args.into());
    }
    let parameterized = args.rows.is_some() && args.cols.is_some();
    let suites: Vec<Suite> = match (args.rows, args.cols) {
        (Some(r), Some(c)) => vec![Suite::Custom(r, c)],
        _ => match args.suite {
            SuiteSel::All => vec![Suite::Llama7b, Suite::Small],
            SuiteSel::Llama7b => vec![Suite::Llama7b],
            SuiteSel::Small => vec![Suite::Small],
            SuiteSel::Types => vec![Suite::Types],
        },
    };
    let layouts = if args.layout.is_empty() {
        LayoutSel::Auto {
            vs_plain: args.vs_plain || !parameterized,
        }
    } else {
        if args.vs_plain && !args.layout.contains(&Layout::Plain) {
            bail!("--vs-plain goes with the chosen layout; with --layout, list plain yourself (e.g. --layout q4_0_8x8,plain)");
        }
        LayoutSel::Fixed(args.layout.clone())
    };
    let reps = |min_time: f64| match args.reps {
        Some(r) => Reps::Fixed(r),
        None => Reps::Adaptive {
            min_time,
            min: 3,
            max: 1000,
        },
    };
    let pick = |given: &[GgmlType], default: &[GgmlType]| {
        if given.is_empty() {
            default.to_vec()
        } else {
            given.to_vec()
        }
    };
    let batches = |default: &[usize]| {
        if args.batch.is_empty() {
            default.to_vec()
        } else {
            args.batch.clone()
        }
    };
    let base = Config {
        types: Vec::new(),
        shapes: Vec::new(),
        batches: Vec::new(),
        layouts,
        reps: reps(args.min_time.unwrap_or(0.3)),
        cold_mb: args.cold_mb,
        seed: args.seed,
        progress: !args.common.quiet,
        check: args.check,
        phases: args.phases,
        skip_unfit: false,
    };
    let plans: Vec<(&str, Config)> = suites
        .iter()
        .map(|suite| match *suite {
            Suite::Custom(r, c) => (
                "",
                Config {
                    types: pick(&args.types, &bench::SUITE_TYPES),
                    shapes: vec![(r, c)],
                    batches: batches(&bench::SUITE_BATCHES),
                    ..base.clone()
                },
            ),
            Suite::Llama7b => (
                "LLaMA-7B shapes",
                Config {
                    types: pick(&args.types, &bench::SUITE_TYPES),
                    shapes: bench::SUITE_SHAPES.to_vec(),
                    batches: batches(&bench::SUITE_BATCHES),
                    ..base.clone()
                },
            ),
            Suite::Types => (
                "every weight type",
                Config {
                    types: pick(&args.types, &bench::TYPES_SUITE_TYPES),
                    shapes: bench::TYPES_SUITE_SHAPES.to_vec(),
                    batches: batches(&bench::TYPES_SUITE_BATCHES),
                    // The chosen layout only: the comparison is with ggml, not with plain.
                    layouts: match &base.layouts {
                        LayoutSel::Auto { .. } => LayoutSel::Auto {
                            vs_plain: args.vs_plain,
                        },
                        fixed => fixed.clone(),
                    },
                    ..base.clone()
                },
            ),
            Suite::Small => (
                "small-model shapes (SmolLM2-135M, Gemma 3 270M)",
                Config {
                    types: pick(&args.types, &bench::SMALL_TYPES),
                    shapes: bench::SMALL_SHAPES.to_vec(),
                    batches: batches(&bench::SMALL_BATCHES),
                    // Only the chosen layout: these calls are short and many.
                    layouts: match &base.layouts {
                        LayoutSel::Auto { .. } => LayoutSel::Auto {
                            vs_plain: args.vs_plain,
                        },
                        fixed => fixed.clone(),
                    },
                    reps: reps(args.min_time.unwrap_or(bench::SMALL_MIN_TIME)),
                    skip_unfit: true,
                    ..base.clone()
                },
            ),
        })
        .collect();
    for (_, cfg) in &plans {
        cfg.validate()?;
    }

    let (pool, threads) = pool(args.common.threads)?;
    if !args.common.quiet {
        eprintln!(
            "qrepack bench: {} measurement(s), cpu {}, {threads} thread(s)",
            plans.iter().map(|(_, c)| c.count()).sum::<usize>(),
            CpuFeatures::get().describe()
        );
    }
    let json = args.common.json;
    let peer = args
        .vs
        .map(|VsEngine::Ggml| args.peer.clone().unwrap_or_else(vs_ggml::default_peer));
    if let Some(p) = &peer {
        vs_ggml::ensure_peer(p)?;
    }
    for (title, cfg) in &plans {
        let results = pool.install(|| {
            bench::run(cfg, |group| {
                if json && peer.is_none() {
                    let mut s = String::new();
                    for m in group {
                        s.push_str(&m.to_json_line()?);
                        s.push('\n');
                    }
                    out(&s)?;
                }
                Ok(())
            })
        })?;
        let ggml = match &peer {
            Some(p) => Some(vs_ggml::time_measurements(
                p,
                &results,
                threads,
                cfg.cold_mb,
                args.common.quiet,
            )?),
            None => None,
        };
        if json {
            if let Some(times) = &ggml {
                let mut s = String::new();
                for m in &results {
                    s.push_str(&vs_ggml::json_line_with_peer(m, times)?);
                    s.push('\n');
                }
                out(&s)?;
            }
            continue;
        }
        let mode = match cfg.reps {
            Reps::Fixed(r) => format!("{r} reps"),
            Reps::Adaptive { min_time, min, .. } => {
                format!("reps until {min_time} s and at least {min}")
            }
        };
        let heading = if title.is_empty() {
            String::new()
        } else {
            format!("{title}: ")
        };
        out(&format!(
            "{heading}qrepack bench: cpu {}, {threads} thread(s), seed {}, median of {mode}; cold = rotating over copies > {} MiB\n\n{}\n",
            CpuFeatures::get().describe(),
            cfg.seed,
            cfg.cold_mb,
            bench::table(&results).render()
        ))?;
        if let Some(times) = &ggml {
            out(&format!(
                "against ggml (the peer's median, repack on and off, same data; ratio = qrepack / the faster ggml mode)\n\n{}\n",
                vs_ggml::comparison_table(&results, times).render()
            ))?;
        }
        if cfg.phases {
            out(&format!(
                "where the time goes (mean per call over a second, profiled series of reps; kernel = busy (the busiest thread in its tasks, imbalance = its lead over the mean) + scheduling)\n\n{}\n",
                bench::phase_table(&results).render()
            ))?;
        }
    }
    Ok(())
}
