//! Collects figures and prints them as one Markdown table.

/// One measured figure.
pub struct Row {
    pub area: &'static str,
    pub figure: String,
    pub value: String,
    pub target: &'static str,
}

#[derive(Default)]
pub struct Report {
    rows: Vec<Row>,
}

impl Report {
    pub fn add(
        &mut self,
        area: &'static str,
        figure: impl Into<String>,
        value: impl Into<String>,
        target: &'static str,
    ) {
        let row = Row { area, figure: figure.into(), value: value.into(), target };
        eprintln!("  {} | {} | {}", row.area, row.figure, row.value);
        self.rows.push(row);
    }

    pub fn print(&self) {
        println!("| area | figure | median / value | target |");
        println!("|---|---|---|---|");
        for row in &self.rows {
            println!("| {} | {} | {} | {} |", row.area, row.figure, row.value, row.target);
        }
    }
}

/// Median and 99th percentile of samples (sorted in place).
#[allow(dead_code)]
pub fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// A `kB` field of /proc/<pid>/status (`VmRSS`, `RssAnon`, …), in KiB; 0 when absent.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
