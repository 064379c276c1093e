//! Progress bars on stderr (indicatif), hidden when stderr is not a terminal or with `-q`.

use std::io::IsTerminal;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use qrepack::model::{Progress, ProgressFn};

/// True when progress should be drawn.
pub fn enabled(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal()
}

/// A bar counting `len` items, prefixed with `what`.
pub fn items(len: u64, what: &str, quiet: bool) -> ProgressBar {
    if !enabled(quiet) {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix} [{bar:30.cyan/blue}] {pos}/{len} {elapsed_precise} eta {eta} {wide_msg}",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(what.to_string());
    pb
}

/// A bar counting bytes, prefixed with `what`.
pub fn bytes(len: u64, what: &str, quiet: bool) -> ProgressBar {
    if !enabled(quiet) {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix} [{bar:30.cyan/blue}] {bytes}/{total_bytes} {elapsed_precise} {wide_msg}",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(what.to_string());
    pb
}

/// A [`Model::open_with`](qrepack::Model::open_with) callback driving a byte bar.
pub fn model_callback(pb: &ProgressBar) -> ProgressFn {
    let pb = pb.clone();
    Arc::new(move |p: Progress| {
        if pb.length() != Some(p.bytes_total) {
            pb.set_length(p.bytes_total);
        }
        pb.set_position(p.bytes_done);
        pb.set_message(format!(
            "{}/{} {}",
            p.tensors_done, p.tensors_total, p.current
        ));
    })
}
