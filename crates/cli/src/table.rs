//! Column output in the style of zpool/zfs: aligned columns with a header by default,
//! `-H` for tab-separated lines without header (scripts).
//!
//! Owns: column widths and alignment (numbers right, words left). Promises: every row
//! has as many cells as the header (asserted: a short row is a bug in a command, and
//! would shift every column after it); scripted output is exactly one tab-separated
//! line per row. Must never: truncate a cell.

pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    /// Columns aligned right (numbers).
    right: Vec<bool>,
}

impl Table {
    pub fn new(header: &[&'static str]) -> Table {
        let right = header
            .iter()
            .map(|h| {
                matches!(
                    *h,
                    "SIZE"
                        | "ALLOC"
                        | "FREE"
                        | "CAP"
                        | "USED"
                        | "AVAIL"
                        | "LUSED"
                        | "RATIO"
                        | "READ"
                        | "WRITE"
                        | "CKSUM"
                )
            })
            .collect();
        Table { header: header.to_vec(), rows: Vec::new(), right }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.header.len(), "row width matches header");
        self.rows.push(cells);
    }

    pub fn print(&self, scripted: bool) {
        if scripted {
            for r in &self.rows {
                println!("{}", r.join("\t"));
            }
            return;
        }
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.len());
            }
        }
        let line = |cells: Vec<&str>| {
            let parts: Vec<String> =
                cells
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        if self.right[i] {
                            format!("{c:>w$}", w = widths[i])
                        } else {
                            format!("{c:<w$}", w = widths[i])
                        }
                    })
                    .collect();
            println!("{}", parts.join("  ").trim_end());
        };
        line(self.header.clone());
        for r in &self.rows {
            line(r.iter().map(String::as_str).collect());
        }
    }
}
