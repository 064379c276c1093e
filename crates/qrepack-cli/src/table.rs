//! Plain-text tables with aligned columns (comfy-table), and the number formats the reports use.

use comfy_table::presets::NOTHING;
use comfy_table::CellAlignment;

/// Column alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table of strings rendered with columns padded to their widest cell, two spaces apart, and
/// a dashed line under the header.
#[derive(Clone, Debug)]
pub struct Table {
    headers: Vec<String>,
    aligns: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with the given `(header, alignment)` columns.
    pub fn new(columns: &[(&str, Align)]) -> Self {
        Table {
            headers: columns.iter().map(|(h, _)| h.to_string()).collect(),
            aligns: columns.iter().map(|(_, a)| *a).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; missing cells are left empty, extra cells are an error of the caller.
    pub fn push(&mut self, row: Vec<String>) {
        assert!(
            row.len() <= self.headers.len(),
            "row has {} cells, table has {} columns",
            row.len(),
            self.headers.len()
        );
        let mut row = row;
        row.resize(self.headers.len(), String::new());
        self.rows.push(row);
    }

    /// The rendered table, one line per row, each ending in `\n`, without trailing spaces.
    pub fn render(&self) -> String {
        // The dashes under the header are a first body row as wide as each column's content
        // (comfy-table's own header line would also run under the gaps between the columns).
        let mut probe = comfy_table::Table::new();
        probe.set_header(&self.headers).add_rows(&self.rows);
        let dashes: Vec<String> = probe
            .column_max_content_widths()
            .iter()
            .map(|&w| "-".repeat(w.into()))
            .collect();

        let mut t = comfy_table::Table::new();
        t.load_style(NOTHING)
            .set_header(&self.headers)
            .add_row(dashes)
            .add_rows(&self.rows);
        let last = self.aligns.len().saturating_sub(1);
        for (i, (col, align)) in t.column_iter_mut().zip(&self.aligns).enumerate() {
            col.set_cell_alignment(match align {
                Align::Left => CellAlignment::Left,
                Align::Right => CellAlignment::Right,
            });
            // two spaces between columns, none at the ends of the line
            col.set_padding((u16::from(i > 0), u16::from(i < last)));
        }
        let mut out = t.trim_fmt();
        out.push('\n');
        out
    }
}

/// Milliseconds with about four significant digits: `0.8123`, `12.35`, `351.2`, `1234`.
pub fn fmt_ms(ms: f64) -> String {
    if !ms.is_finite() {
        "-".to_string()
    } else if ms < 1.0 {
        format!("{ms:.4}")
    } else if ms < 10.0 {
        format!("{ms:.3}")
    } else if ms < 100.0 {
        format!("{ms:.2}")
    } else if ms < 1000.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.0}")
    }
}

/// A rate (GFLOP/s, GB/s) with one decimal, two below 10.
pub fn fmt_rate(v: f64) -> String {
    if !v.is_finite() {
        "-".to_string()
    } else if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// A speedup factor, `1.23x`, or `-` when there is none.
pub fn fmt_speedup(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.2}x"),
        _ => "-".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_and_aligned() {
        let mut t = Table::new(&[
            ("type", Align::Left),
            ("ms", Align::Right),
            ("note", Align::Left),
        ]);
        t.push(vec!["q4_0".into(), "0.9".into(), "x".into()]);
        t.push(vec!["iq4_nl".into(), "351.2".into(), String::new()]);
        t.push(vec!["q8_0".into()]);
        assert_eq!(
            t.render(),
            "type       ms  note\n\
             ------  -----  ----\n\
             q4_0      0.9  x\n\
             iq4_nl  351.2\n\
             q8_0\n"
        );
    }

    #[test]
    fn header_only_table() {
        let t = Table::new(&[("a", Align::Right), ("bb", Align::Left)]);
        assert_eq!(t.render(), "a  bb\n-  --\n");
    }

    #[test]
    fn number_formats() {
        assert_eq!(fmt_ms(0.81234), "0.8123");
        assert_eq!(fmt_ms(1.5), "1.500");
        assert_eq!(fmt_ms(12.346), "12.35");
        assert_eq!(fmt_ms(351.23), "351.2");
        assert_eq!(fmt_ms(1234.4), "1234");
        assert_eq!(fmt_ms(f64::NAN), "-");
        assert_eq!(fmt_rate(3.25159), "3.25");
        assert_eq!(fmt_rate(49.04), "49.0");
        assert_eq!(fmt_speedup(Some(1.5)), "1.50x");
        assert_eq!(fmt_speedup(None), "-");
    }
}
