//! Summaries, reports and comparisons: the JSON line, the HDR percentile distribution, SVG
//! pictures of latency by percentile and throughput over time, and `compare`.

use std::path::Path;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// Percentiles plotted and kept in the JSON, so two runs can be drawn together later.
const PLOT_PERCENTILES: &[f64] = &[
    0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.999, 100.0,
];

pub struct Run<'a> {
    pub mode: &'a str,
    pub msgs: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub latency_us: &'a Histogram<u64>,
    /// Each transaction's commit, from its last send until `commit_transaction` returned (the
    /// flush of what it still had in flight, then EndTxn); `None` for a run without transactions.
    pub commit_latency_us: Option<&'a Histogram<u64>>,
    /// Messages completed in each whole second of the run.
    pub per_second: &'a [u64],
    pub config: Value,
    pub broker: &'a str,
    /// CPU the broker(s) and this process spent over the measured phase.
    pub cpu: Option<&'a crate::cpu::Usage>,
}

pub fn summary(run: &Run<'_>) -> Value {
    let h = run.latency_us;
    let mut s = json!({
        "mode": run.mode,
        "msgs": run.msgs,
        "msgs_per_sec": run.msgs as f64 / run.seconds.max(1e-9),
        "mb_per_sec": run.bytes as f64 / run.seconds.max(1e-9) / 1e6,
        "seconds": run.seconds,
        "latency_us": latency_json(h),
        "latency_percentiles_us": PLOT_PERCENTILES.iter().map(|p| json!([p, if h.is_empty() { 0 } else { h.value_at_percentile(*p) }])).collect::<Vec<_>>(),
        "throughput_per_second": run.per_second,
        "config": run.config,
        "broker": run.broker,
        "git_sha": env!("TRIBUTARY_GIT_SHA"),
    });
    if let Some(c) = run.commit_latency_us {
        let q = |p: f64| {
            if c.is_empty() {
                0
            } else {
                c.value_at_quantile(p)
            }
        };
        s["commit_latency_us"] = json!({
            "transactions": c.len(), "p50": q(0.5), "p99": q(0.99), "max": c.max(),
        });
    }
    if let Some(cpu) = run.cpu {
        if let (Some(obj), Value::Object(fields)) = (s.as_object_mut(), cpu.to_json(run.bytes)) {
            obj.extend(fields);
        }
    }
    s
}

/// The latency fields of a summary (`latency_us`, and `e2e_latency_us` in `run`).
pub fn latency_json(h: &Histogram<u64>) -> Value {
    let q = |p: f64| {
        if h.is_empty() {
            0
        } else {
            h.value_at_quantile(p)
        }
    };
    json!({"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p999": q(0.999), "p9999": q(0.9999), "max": h.max()})
}

/// The CPU line of a summary, if the run measured any.
pub fn cpu_line(s: &Value) -> Option<String> {
    let bench = s["bench_cpu_s"].as_f64()?;
    let per_gb = |v: &Value| {
        v.as_f64()
            .map(|x| format!(" = {x:.2} s/GB"))
            .unwrap_or_default()
    };
    let broker = match s["broker_cpu_s"].as_f64() {
        Some(b) => format!(
            "broker {b:.2} s{} (io_uring workers at least {:.2} s), ",
            per_gb(&s["broker_cpu_s_per_gb"]),
            s["broker_io_uring_worker_cpu_s"].as_f64().unwrap_or(0.0)
        ),
        None => String::new(),
    };
    Some(format!(
        "CPU: {broker}bench {bench:.2} s{}",
        per_gb(&s["bench_cpu_s_per_gb"])
    ))
}

pub fn print_summary(s: &Value) {
    let l = &s["latency_us"];
    let head = format!(
        "{} {} msgs in {:.2}s: {:.0} msgs/s, {:.1} MB/s",
        s["mode"].as_str().unwrap_or(""),
        s["msgs"],
        s["seconds"].as_f64().unwrap_or(0.0),
        s["msgs_per_sec"].as_f64().unwrap_or(0.0),
        s["mb_per_sec"].as_f64().unwrap_or(0.0),
    );
    // `consume` measures throughput only; its histogram stays empty.
    if l["max"].as_u64().unwrap_or(0) == 0 {
        println!("{head}");
    } else {
        println!(
            "{head}; latency p50 {} us, p99 {} us, p99.9 {} us, max {} us",
            l["p50"], l["p99"], l["p999"], l["max"]
        );
    }
    let c = &s["commit_latency_us"];
    if c.is_object() {
        println!(
            "commit_transaction (EndTxn + flush) over {} transactions: p50 {} us, p99 {} us, max {} us",
            c["transactions"], c["p50"], c["p99"], c["max"]
        );
    }
    if let Some(line) = cpu_line(s) {
        println!("{line}");
    }
}

/// Writes summary.json, latency.hgrm, latency.svg and throughput.svg into `dir`.
pub fn write_report(dir: &Path, s: &Value, h: &Histogram<u64>) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating report directory {}", dir.display()))?;
    std::fs::write(dir.join("summary.json"), serde_json::to_string_pretty(s)?)?;
    std::fs::write(dir.join("latency.hgrm"), hgrm(h))?;
    std::fs::write(dir.join("latency.svg"), latency_svg(&[("run", s)]))?;
    std::fs::write(dir.join("throughput.svg"), throughput_svg(&[("run", s)]))?;
    Ok(())
}

/// The percentile distribution of `h` in HdrHistogram's text format.
pub fn hgrm(h: &Histogram<u64>) -> String {
    let mut hgrm = String::from("       Value     Percentile TotalCount 1/(1-Percentile)\n\n");
    if !h.is_empty() {
        for v in h.iter_quantiles(1) {
            let q = v.quantile_iterated_to();
            let inv = if q < 1.0 {
                1.0 / (1.0 - q)
            } else {
                f64::INFINITY
            };
            hgrm.push_str(&format!(
                "{:12.3} {:14.12} {:10} {:14.2}\n",
                v.value_iterated_to() as f64,
                q,
                v.count_since_last_iteration(),
                inv
            ));
        }
    }
    hgrm
}

const COLORS: &[&str] = &["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

fn svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
) -> String {
    let (w, h, m) = (720.0, 420.0, 60.0);
    let xs = |x: f64| {
        if log_x {
            (1.0 / (1.0 - x.min(0.99999) / 100.0)).log10()
        } else {
            x
        }
    };
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, pts)| pts.iter().map(|(x, y)| (xs(*x), *y)))
        .collect();
    let max_x = all.iter().map(|p| p.0).fold(1e-9, f64::max);
    let max_y = all.iter().map(|p| p.1).fold(1e-9, f64::max) * 1.1;
    let px = |x: f64| m + xs(x) / max_x * (w - 2.0 * m);
    let py = |y: f64| h - m - y / max_y * (h - 2.0 * m);
    let mut out = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\
<rect width='100%' height='100%' fill='white'/><text x='{}' y='20' text-anchor='middle' font-size='14'>{title}</text>\
<line x1='{m}' y1='{}' x2='{}' y2='{}' stroke='black'/><line x1='{m}' y1='{m}' x2='{m}' y2='{}' stroke='black'/>\
<text x='{}' y='{}' text-anchor='middle'>{x_label}</text><text x='15' y='{}' transform='rotate(-90 15 {})' text-anchor='middle'>{y_label}</text>\
<text x='{}' y='{}' text-anchor='end'>{:.0}</text><text x='{}' y='{}' text-anchor='end'>0</text>",
        w / 2.0, h - m, w - m, h - m, h - m, w / 2.0, h - 15.0, h / 2.0, h / 2.0, m - 5.0, m + 4.0, max_y, m - 5.0, h - m
    );
    if log_x {
        for p in [50.0, 90.0, 99.0, 99.9, 99.99] {
            out.push_str(&format!(
                "<text x='{:.1}' y='{}' text-anchor='middle'>p{p}</text>",
                px(p),
                h - m + 15.0
            ));
        }
    }
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        out.push_str(&format!(
            "<polyline fill='none' stroke='{c}' stroke-width='2' points='{}'/>",
            path.join(" ")
        ));
        out.push_str(&format!(
            "<text x='{}' y='{}' fill='{c}'>{name}</text>",
            w - m - 150.0,
            m + 15.0 * i as f64
        ));
    }
    out.push_str("</svg>\n");
    out
}

pub fn latency_svg(runs: &[(&str, &Value)]) -> String {
    let series = runs
        .iter()
        .map(|(name, s)| {
            let pts = s["latency_percentiles_us"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?)))
                        .collect()
                })
                .unwrap_or_default();
            (name.to_string(), pts)
        })
        .collect::<Vec<_>>();
    svg(
        "Latency by percentile",
        "percentile",
        "latency (us)",
        &series,
        true,
    )
}

pub fn throughput_svg(runs: &[(&str, &Value)]) -> String {
    let series = runs
        .iter()
        .map(|(name, s)| {
            let pts = s["throughput_per_second"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .enumerate()
                        .filter_map(|(i, v)| Some((i as f64 + 1.0, v.as_f64()?)))
                        .collect()
                })
                .unwrap_or_default();
            (name.to_string(), pts)
        })
        .collect::<Vec<_>>();
    svg(
        "Throughput over time",
        "second",
        "messages / s",
        &series,
        false,
    )
}

/// `compare A.json B.json`: the two runs side by side, with B/A ratios.
pub fn compare(a_path: &Path, b_path: &Path, report: Option<&Path>) -> Result<()> {
    let load = |p: &Path| -> Result<Value> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let line = text
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .unwrap_or(&text);
        serde_json::from_str(line)
            .or_else(|_| serde_json::from_str(&text))
            .with_context(|| format!("{} is not a tributary-bench JSON summary", p.display()))
    };
    let (a, b) = (load(a_path)?, load(b_path)?);
    println!("{:<20} {:>14} {:>14} {:>8}", "metric", "A", "B", "B/A");
    for (name, x, y) in compare_rows(&a, &b) {
        let ratio = if x > 0.0 {
            format!("{:.3}", y / x)
        } else {
            "-".into()
        };
        println!("{name:<20} {:>14} {:>14} {ratio:>8}", figure(x), figure(y));
    }
    if let Some(dir) = report {
        std::fs::create_dir_all(dir)?;
        let runs = [("A", &a), ("B", &b)];
        std::fs::write(dir.join("compare-latency.svg"), latency_svg(&runs))?;
        std::fs::write(dir.join("compare-throughput.svg"), throughput_svg(&runs))?;
        eprintln!("wrote {}", dir.join("compare-latency.svg").display());
    }
    Ok(())
}

/// A figure for `compare`: one decimal, or three below 100 (CPU-seconds per GB are often < 1).
fn figure(x: f64) -> String {
    if x.abs() < 100.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.1}")
    }
}

/// Rows always compared, as (name, path into the summary).
const COMPARE_ROWS: &[(&str, &[&str])] = &[
    ("msgs_per_sec", &["msgs_per_sec"]),
    ("mb_per_sec", &["mb_per_sec"]),
    ("p50_us", &["latency_us", "p50"]),
    ("p90_us", &["latency_us", "p90"]),
    ("p99_us", &["latency_us", "p99"]),
    ("p999_us", &["latency_us", "p999"]),
    ("p9999_us", &["latency_us", "p9999"]),
    ("max_us", &["latency_us", "max"]),
];

/// Rows compared when either summary has them: `run`'s consume side and end-to-end latency, and
/// the CPU figures of runs given `--broker-pid` (the bench's own CPU is in every newer summary).
const OPTIONAL_COMPARE_ROWS: &[(&str, &[&str])] = &[
    ("consume_msgs_per_sec", &["consume", "msgs_per_sec"]),
    ("e2e_p50_us", &["e2e_latency_us", "p50"]),
    ("e2e_p99_us", &["e2e_latency_us", "p99"]),
    ("e2e_p999_us", &["e2e_latency_us", "p999"]),
    ("e2e_max_us", &["e2e_latency_us", "max"]),
    ("broker_cpu_s", &["broker_cpu_s"]),
    ("broker_cpu_s_per_gb", &["broker_cpu_s_per_gb"]),
    ("bench_cpu_s", &["bench_cpu_s"]),
    ("bench_cpu_s_per_gb", &["bench_cpu_s_per_gb"]),
];

/// The (name, A, B) rows `compare` prints; a figure missing from one side counts as 0.
fn compare_rows(a: &Value, b: &Value) -> Vec<(&'static str, f64, f64)> {
    let get = |v: &Value, path: &[&str]| path.iter().fold(v, |v, k| &v[*k]).as_f64();
    let mut rows: Vec<_> = COMPARE_ROWS
        .iter()
        .map(|(name, path)| (*name, get(a, path), get(b, path)))
        .collect();
    rows.extend(
        OPTIONAL_COMPARE_ROWS
            .iter()
            .map(|(name, path)| (*name, get(a, path), get(b, path)))
            .filter(|(_, x, y)| x.is_some() || y.is_some()),
    );
    rows.into_iter()
        .map(|(name, x, y)| (name, x.unwrap_or(0.0), y.unwrap_or(0.0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(samples: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
        for s in samples {
            h.record(*s).expect("in range");
        }
        h
    }

    fn run<'a>(latency: &'a Histogram<u64>, commits: Option<&'a Histogram<u64>>) -> Run<'a> {
        Run {
            mode: "produce",
            msgs: 10,
            bytes: 10_240,
            seconds: 1.0,
            latency_us: latency,
            commit_latency_us: commits,
            per_second: &[10],
            config: json!({}),
            broker: "127.0.0.1:9092",
            cpu: None,
        }
    }

    #[test]
    fn commit_latency_is_absent_without_transactions() {
        let h = histogram(&[100, 200]);
        let s = summary(&run(&h, None));
        assert!(s.get("commit_latency_us").is_none());
        assert_eq!(s["msgs"], 10);
    }

    #[test]
    fn commit_latency_reports_count_p50_p99_and_max() {
        let h = histogram(&[100]);
        let samples: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        let c = histogram(&samples);
        let s = summary(&run(&h, Some(&c)));
        let cl = &s["commit_latency_us"];
        assert_eq!(cl["transactions"], 100);
        let p50 = cl["p50"].as_u64().expect("p50");
        let p99 = cl["p99"].as_u64().expect("p99");
        let max = cl["max"].as_u64().expect("max");
        // Three significant digits: values within 0.1 % of the sample.
        assert!((49_950..=50_050).contains(&p50), "p50 {p50}");
        assert!((98_900..=99_100).contains(&p99), "p99 {p99}");
        assert!((99_900..=100_100).contains(&max), "max {max}");
    }

    #[test]
    fn a_transactional_run_without_commits_reports_zeros() {
        let h = histogram(&[]);
        let c = histogram(&[]);
        let s = summary(&run(&h, Some(&c)));
        assert_eq!(s["commit_latency_us"]["transactions"], 0);
        assert_eq!(s["commit_latency_us"]["p99"], 0);
    }

    #[test]
    fn cpu_figures_join_the_summary_per_gb_of_its_bytes() {
        let h = histogram(&[100]);
        let cpu = crate::cpu::Usage {
            broker_pids: vec![11, 12],
            broker_cpu_s: Some(0.5),
            broker_io_uring_worker_cpu_s: Some(0.1),
            bench_cpu_s: 1.0,
            machine_steal_pct: Some(2.5),
        };
        let mut r = run(&h, None);
        r.bytes = 250_000_000;
        r.cpu = Some(&cpu);
        let s = summary(&r);
        assert_eq!(s["broker_cpu_s"], 0.5);
        assert_eq!(s["broker_cpu_s_per_gb"], 2.0);
        assert_eq!(s["bench_cpu_s_per_gb"], 4.0);
        assert_eq!(s["machine_steal_pct"], 2.5);
        assert_eq!(s["broker_pids"], json!([11, 12]));
        let line = cpu_line(&s).expect("a CPU line");
        assert!(line.contains("broker 0.50 s = 2.00 s/GB"), "{line}");
        assert!(line.contains("bench 1.00 s = 4.00 s/GB"), "{line}");
        assert!(cpu_line(&summary(&run(&h, None))).is_none());
    }

    #[test]
    fn compare_shows_cpu_and_e2e_rows_only_when_a_side_has_them() {
        let old = json!({"msgs_per_sec": 100.0, "latency_us": {"p99": 10}});
        let rows = compare_rows(&old, &old);
        let names: Vec<&str> = rows.iter().map(|r| r.0).collect();
        let always: Vec<&str> = COMPARE_ROWS.iter().map(|r| r.0).collect();
        assert_eq!(names, always);
        let new = json!({"msgs_per_sec": 200.0, "broker_cpu_s": 3.0, "broker_cpu_s_per_gb": 1.5,
                         "e2e_latency_us": {"p99": 40}});
        let rows = compare_rows(&old, &new);
        let find = |n: &str| rows.iter().find(|r| r.0 == n).copied();
        assert_eq!(find("msgs_per_sec"), Some(("msgs_per_sec", 100.0, 200.0)));
        assert_eq!(
            find("broker_cpu_s_per_gb"),
            Some(("broker_cpu_s_per_gb", 0.0, 1.5))
        );
        assert_eq!(find("e2e_p99_us"), Some(("e2e_p99_us", 0.0, 40.0)));
        assert_eq!(find("bench_cpu_s"), None);
    }
}
