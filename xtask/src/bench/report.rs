//! Bench results: rows, markdown tables and JSON files.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::host;
use crate::error::{Error, Result};

/// One measured figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The suite (`stream`, `fma`, `read`, ...).
    pub suite: String,
    /// What was measured within it (`triad`, `avx512`, ...).
    pub case: String,
    /// Threads used, when it applies.
    pub threads: Option<usize>,
    /// The figure.
    pub value: f64,
    /// Its unit (`GB/s`, `GFLOP/s`, `ms`).
    pub unit: &'static str,
    /// Standard deviation over the repetitions, when the value is a mean.
    pub stddev: Option<f64>,
    /// The most this machine allows for the figure, in the same unit (the
    /// STREAM bandwidth for a memory-bound kernel, the peak FMA rate for a
    /// compute-bound one), when one applies.
    pub bound: Option<f64>,
    /// How it was measured.
    pub note: String,
}

impl Row {
    /// A row.
    pub fn new(
        suite: &str,
        case: impl Into<String>,
        threads: Option<usize>,
        value: f64,
        unit: &'static str,
        note: impl Into<String>,
    ) -> Row {
        Row {
            suite: suite.into(),
            case: case.into(),
            threads,
            value,
            unit,
            stddev: None,
            bound: None,
            note: note.into(),
        }
    }

    /// The row with the standard deviation of its (mean) value.
    pub fn with_stddev(mut self, stddev: f64) -> Row {
        self.stddev = Some(stddev);
        self
    }

    /// The row with the bound its value is compared to.
    pub fn with_bound(mut self, bound: Option<f64>) -> Row {
        self.bound = bound.filter(|b| b.is_finite() && *b > 0.0);
        self
    }

    /// The value as a fraction of the bound.
    pub fn fraction(&self) -> Option<f64> {
        self.bound.map(|b| self.value / b)
    }
}

/// The rows of one bench group.
#[derive(Clone, Debug)]
pub struct Report {
    /// Group name: the JSON file is `<name>.json`.
    pub name: String,
    /// Results in measurement order.
    pub rows: Vec<Row>,
    /// Load averages when the group started.
    pub load_start: Option<[f64; 3]>,
}

/// Three significant figures at least, no exponent.
fn fmt_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

impl Report {
    /// An empty report.
    pub fn new(name: &str) -> Report {
        Report {
            name: name.into(),
            rows: Vec::new(),
            load_start: host::load_average(),
        }
    }

    /// A markdown table of the rows, headed by the host.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "## {} ({})\n\nload average (1, 5, 15 min): {} at the start, {} at the end\n\n",
            self.name,
            host::summary(),
            host::load_line(self.load_start),
            host::load_line(host::load_average())
        );
        s.push_str("| suite | case | threads | value | unit | bound | of bound | notes |\n");
        s.push_str("|---|---|---:|---:|---|---:|---:|---|\n");
        for r in &self.rows {
            let threads = r.threads.map(|t| t.to_string()).unwrap_or_default();
            let value = match r.stddev {
                Some(sd) => format!("{} ± {}", fmt_value(r.value), fmt_value(sd)),
                None => fmt_value(r.value),
            };
            let bound = r.bound.map(fmt_value).unwrap_or_default();
            let frac = r
                .fraction()
                .map(|f| format!("{:.0}%", f * 100.0))
                .unwrap_or_default();
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.suite, r.case, threads, value, r.unit, bound, frac, r.note
            ));
        }
        s
    }

    /// The report as JSON.
    pub fn json(&self) -> serde_json::Value {
        let unix_time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let rows: Vec<_> = self
            .rows
            .iter()
            .map(|r| {
                json!({
                    "suite": r.suite,
                    "case": r.case,
                    "threads": r.threads,
                    "value": r.value,
                    "unit": r.unit,
                    "stddev": r.stddev,
                    "bound": r.bound,
                    "fraction": r.fraction(),
                    "note": r.note,
                })
            })
            .collect();
        json!({
            "name": self.name,
            "unix_time": unix_time,
            "host": host::json(),
            "load_average_start": self.load_start,
            "load_average_end": host::load_average(),
            "rows": rows,
        })
    }

    /// Writes `<dir>/<name>.json` and returns its path.
    pub fn save(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let path = dir.join(format!("{}.json", self.name));
        let text = serde_json::to_string_pretty(&self.json())?;
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_and_json() {
        let mut r = Report::new("t");
        r.rows.push(Row::new(
            "stream",
            "triad",
            Some(2),
            12.3456,
            "GB/s",
            "best of 10",
        ));
        r.rows.push(
            Row::new("tg", "tg128", Some(1), 5.0, "tok/s", "")
                .with_stddev(0.25)
                .with_bound(Some(20.0)),
        );
        let md = r.markdown();
        assert!(
            md.contains("| stream | triad | 2 | 12.35 | GB/s |  |  | best of 10 |"),
            "{md}"
        );
        assert!(
            md.contains("| tg | tg128 | 1 | 5.00 ± 0.2500 | tok/s | 20.00 | 25% |  |"),
            "{md}"
        );
        let j = r.json();
        assert_eq!(j["rows"][0]["value"], 12.3456);
        assert_eq!(j["rows"][0]["threads"], 2);
        assert!(j["rows"][0]["bound"].is_null());
        assert_eq!(j["rows"][1]["fraction"], 0.25);
        assert_eq!(j["rows"][1]["stddev"], 0.25);
        assert!(Row::new("x", "y", None, 1.0, "ms", "")
            .with_bound(Some(0.0))
            .bound
            .is_none());
    }
}
