//! A Markdown table: a header, the alignment rule under it, and one line per row.

use std::fmt::{self, Display, Write as _};

/// How a column's cells line up: text to the left, figures to the right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// `---`: names, labels, cells that mix words and figures.
    Left,
    /// `---:`: figures, so that their digits line up in a renderer.
    Right,
}

/// A Markdown table built row by row and rendered with `Display`.
///
/// ```
/// use gigas_report::Table;
/// let mut t = Table::new("lr", ["mode", "changes/s"]);
/// t.row(["live".to_string(), format!("{:.0}", 87248.4)]);
/// assert_eq!(t.to_string(), "| mode | changes/s |\n|---|---:|\n| live | 87248 |\n");
/// ```
#[derive(Debug, Clone)]
pub struct Table {
    align: Vec<Align>,
    lines: String,
}

impl Table {
    /// A table with one column per header, aligned by `align`, one letter per column: `l`
    /// for [`Align::Left`], `r` for [`Align::Right`].
    ///
    /// # Panics
    ///
    /// When `align` has another letter or its length differs from the headers': both are
    /// written in the caller's code, so a mismatch is a bug there, not bad input.
    pub fn new<S: AsRef<str>>(align: &str, headers: impl IntoIterator<Item = S>) -> Self {
        let align: Vec<Align> = align
            .chars()
            .map(|c| match c {
                'l' => Align::Left,
                'r' => Align::Right,
                other => panic!("column alignment '{other}': use l or r"),
            })
            .collect();
        let mut t = Self {
            align,
            lines: String::new(),
        };
        let headers: Vec<S> = headers.into_iter().collect();
        assert_eq!(
            headers.len(),
            t.align.len(),
            "one alignment letter per header"
        );
        t.line(headers.iter().map(|h| h.as_ref()));
        t.lines.push('|');
        for a in &t.align {
            t.lines.push_str(match a {
                Align::Left => "---|",
                Align::Right => "---:|",
            });
        }
        t.lines.push('\n');
        t
    }

    /// Appends a row, one cell per column. A cell may be anything printable: a label, a
    /// figure already formatted, `format!`'s result.
    ///
    /// # Panics
    ///
    /// When the number of cells differs from the number of columns (a bug at the call).
    pub fn row<T: Display>(&mut self, cells: impl IntoIterator<Item = T>) {
        let before = self.lines.len();
        let n = self.line(cells);
        if n != self.align.len() {
            let line = self.lines.split_off(before);
            panic!(
                "a row of {n} cells in a table of {} columns: {line}",
                self.align.len()
            );
        }
    }

    /// How many rows were added (the header is not one).
    pub fn rows(&self) -> usize {
        self.lines.lines().count().saturating_sub(2)
    }

    fn line<T: Display>(&mut self, cells: impl IntoIterator<Item = T>) -> usize {
        self.lines.push('|');
        let mut n = 0;
        for cell in cells {
            let _ = write!(self.lines, " {cell} |");
            n += 1;
        }
        self.lines.push('\n');
        n
    }
}

impl Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_rule_and_rows() {
        let mut t = Table::new("lrl", ["a", "b", "c"]);
        t.row(["x".to_string(), 1.to_string(), format!("{:.1}", 2.25)]);
        t.row(["y", "22", "-"]);
        assert_eq!(
            t.to_string(),
            "| a | b | c |\n|---|---:|---|\n| x | 1 | 2.2 |\n| y | 22 | - |\n"
        );
        assert_eq!(t.rows(), 2);
    }

    #[test]
    fn an_empty_header_cell_stays_a_column() {
        let t = Table::new("rl", ["n", ""]);
        assert_eq!(t.to_string(), "| n |  |\n|---:|---|\n");
        assert_eq!(t.rows(), 0);
    }

    #[test]
    #[should_panic(expected = "a row of 1 cells in a table of 2 columns")]
    fn a_short_row_is_a_bug_at_the_call() {
        let mut t = Table::new("ll", ["a", "b"]);
        t.row(["only"]);
    }

    #[test]
    #[should_panic(expected = "one alignment letter per header")]
    fn alignment_and_headers_must_agree() {
        let _ = Table::new("l", ["a", "b"]);
    }
}
