//! Medians and spreads: every figure in the report is a [`Summary`] of several
//! samples (runs, flushes, requests), never a single best run.

/// A set of samples, reduced to what the report prints: the median, and the
/// spread as min–max (and p10–p90 where there are many samples).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub p10: f64,
    pub p90: f64,
    /// How many samples it summarises.
    pub n: usize,
}

impl Summary {
    /// The summary of `samples` (NaNs left out), or `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Self> {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| !v.is_nan()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        Some(Self {
            median: percentile(&sorted, 0.5),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            p10: percentile(&sorted, 0.1),
            p90: percentile(&sorted, 0.9),
            n: sorted.len(),
        })
    }

    /// `median (min–max)`, each with `decimals`; just the value for one sample.
    pub fn cell(&self, decimals: usize) -> String {
        if self.n <= 1 || self.min == self.max {
            return num(self.median, decimals);
        }
        format!(
            "{} ({}–{})",
            num(self.median, decimals),
            num(self.min, decimals),
            num(self.max, decimals)
        )
    }

    /// `median (p10–p90)`: for many samples, where min and max are outliers.
    pub fn cell_p(&self, decimals: usize) -> String {
        if self.n <= 2 || self.p10 == self.p90 {
            return self.cell(decimals);
        }
        format!(
            "{} ({}–{})",
            num(self.median, decimals),
            num(self.p10, decimals),
            num(self.p90, decimals)
        )
    }
}

/// Linear interpolation between the closest ranks of sorted samples.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.len() == 1 {
        return sorted[0];
    }
    let rank = q * (sorted.len() - 1) as f64;
    let low = rank.floor() as usize;
    let high = rank.ceil() as usize;
    sorted[low] + (sorted[high] - sorted[low]) * (rank - low as f64)
}

/// A number with thousands separators and `decimals` decimals: `12,345.6`.
pub fn num(value: f64, decimals: usize) -> String {
    if !value.is_finite() {
        return "–".into();
    }
    let text = format!("{:.*}", decimals, value.abs());
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let mut grouped = String::new();
    for (i, digit) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    let sign = if value < 0.0 && text.chars().any(|c| c != '0' && c != '.') {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

/// `1 run`, `3 runs`.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{} {noun}s", num(n as f64, 0))
    }
}

/// A count of bytes in B, KiB or MiB.
pub fn bytes(value: f64) -> String {
    if value >= 1024.0 * 1024.0 {
        format!("{} MiB", num(value / 1024.0 / 1024.0, 1))
    } else if value >= 1024.0 {
        format!("{} KiB", num(value / 1024.0, 1))
    } else {
        format!("{} B", num(value, 0))
    }
}

/// `a / b` as `12.3×` (or `–` when either is missing or zero).
pub fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 && a > 0.0 {
        let r = a / b;
        let decimals = if r >= 100.0 {
            0
        } else if r >= 10.0 {
            1
        } else {
            2
        };
        format!("{}×", num(r, decimals))
    } else {
        "–".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        let s = Summary::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (3.0, 1.0, 5.0, 3));
        assert_eq!(s.cell(1), "3.0 (1.0–5.0)");
        assert_eq!(Summary::of(&[2.0]).unwrap().cell(0), "2");
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(num(1234567.891, 1), "1,234,567.9");
        assert_eq!(num(999.0, 0), "999");
        assert_eq!(num(-0.5, 1), "-0.5");
        assert_eq!(bytes(2048.0), "2.0 KiB");
        assert_eq!(ratio(10.0, 2.0), "5.00×");
    }
}
