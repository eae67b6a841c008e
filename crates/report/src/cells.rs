//! The one owner of how a value becomes a cell of printed output: a CSV field, a Markdown
//! cell, an aligned table, and each duration format (one function per format, named by what
//! it prints), as hyperfine keeps its units in one module.
//!
//! Durations take the unit their callers hold (µs for the lab's rows, ns for records, ms for
//! the fingerprint), and each function says what it prints.

use crate::stats::Interval;

/// A CSV field (RFC 4180 2.6/2.7): quoted when it holds a comma, a quote or a line break,
/// with its quotes doubled.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Markdown text with its `|` escaped, so it never opens a table column (the one Markdown
/// escape; text in a table goes through [`md_cell`]).
pub fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A Markdown table cell: escaped, and line breaks made spaces, so the row stays one row.
pub fn md_cell(s: &str) -> String {
    md_escape(s).replace('\n', " ")
}

/// Rows of cells as an aligned table: the first column left-aligned, the others
/// right-aligned, columns joined by `sep`, trailing blanks cut.
pub fn aligned(rows: &[Vec<String>], sep: &str) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> =
        (0..cols).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c > 0 {
                line.push_str(sep);
            }
            let pad = width[c] - cell.chars().count();
            if c == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Microseconds as a bare number of milliseconds for a table column (the unit in its
/// header): 3 significant digits down to 2 decimals ("123", "12.3", "1.23").
pub fn ms_column(us: f64) -> String {
    let m = us / 1000.0;
    if m >= 100.0 {
        format!("{m:.0}")
    } else if m >= 10.0 {
        format!("{m:.1}")
    } else {
        format!("{m:.2}")
    }
}

/// Microseconds as milliseconds in a sentence: whole from 10 ms, else one decimal
/// ("40 ms", "1.5 ms").
pub fn ms_words(us: f64) -> String {
    let ms = us / 1000.0;
    if ms >= 10.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

/// Milliseconds with one decimal and the unit ("40.2 ms").
pub fn ms_1dp(ms: f64) -> String {
    format!("{ms:.1} ms")
}

/// Nanoseconds with one decimal of a millisecond and the unit ("40.2 ms").
pub fn ns_as_ms_1dp(ns: u64) -> String {
    ms_1dp(ns as f64 / 1e6)
}

/// Nanoseconds in milliseconds to 3 decimals from 1 ms, else in microseconds to 1 decimal
/// ("1.250 ms", "812.5 us"): the link's calibration and delays.
pub fn ms_or_us(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} us", ns as f64 / 1e3)
    }
}

/// An interval of microseconds in milliseconds, for a sentence: "1.23 ms [95% CI 1.10-1.40]".
pub fn interval_ms_words(i: &Interval) -> String {
    format!("{:.2} ms [95% CI {:.2}-{:.2}]", i.est / 1e3, i.lo / 1e3, i.hi / 1e3)
}

/// An interval of microseconds in milliseconds, for a table column (the unit in its header):
/// "1.23 [1.10-1.40]".
pub fn interval_ms_column(i: &Interval) -> String {
    format!("{:.2} [{:.2}-{:.2}]", i.est / 1e3, i.lo / 1e3, i.hi / 1e3)
}

/// Nanoseconds as a number of milliseconds (for a caller's own format).
pub fn ms_of_ns(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Nanoseconds as a number of milliseconds rounded to the microsecond (the HTML report's
/// data: short numbers, no false precision).
pub fn ms_of_ns_to_us(ns: u64) -> f64 {
    (ns as f64 / 1e3).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_and_markdown_cells() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(md_cell("a|b\nc"), "a\\|b c");
        assert_eq!(md_escape("a|b\n"), "a\\|b\n");
    }

    #[test]
    fn the_table_aligns_first_left_then_right() {
        let rows = vec![vec!["name".into(), "n".into()], vec!["x".into(), "1234".into()]];
        assert_eq!(aligned(&rows, "  "), "name     n\nx     1234\n");
    }

    #[test]
    fn each_duration_format() {
        assert_eq!(
            (ms_column(123_456.0), ms_column(12_345.0), ms_column(1_234.0)),
            ("123".into(), "12.3".into(), "1.23".into())
        );
        assert_eq!((ms_words(40_200.0), ms_words(1_520.0)), ("40 ms".into(), "1.5 ms".into()));
        assert_eq!((ms_1dp(40.25), ns_as_ms_1dp(40_250_000)), ("40.2 ms".into(), "40.2 ms".into()));
        assert_eq!((ms_or_us(1_250_000), ms_or_us(812_500)), ("1.250 ms".into(), "812.5 us".into()));
        let i = Interval { est: 1230.0, lo: 1100.0, hi: 1400.0 };
        assert_eq!(interval_ms_words(&i), "1.23 ms [95% CI 1.10-1.40]");
        assert_eq!(interval_ms_column(&i), "1.23 [1.10-1.40]");
        assert_eq!((ms_of_ns(1_500_000), ms_of_ns_to_us(1_234_567)), (1.5, 1.235));
    }
}
