//! `plot-samples SAMPLES.csv OUT.png [TITLE]`: a PNG of one pipeline run sampled by
//! `pubsub-connector bench --samples-dir` (columns `at_s,cpu_s,rss_kib,<start counter>,
//! <end counter>,<after counter>[,<gauge>...]`). Three panels over seconds since start:
//! resident memory (MiB); the counters' rates (per second, over 1 s windows); the gauges
//! (e.g. `pending_acks`, held messages), if any. Text is drawn with DejaVu Sans
//! (`PLOT_FONT` names another TTF file).

use anyhow::Context;
use plotters::prelude::*;

const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// The CSV: its header and one row of numbers per sample.
struct Samples {
    header: Vec<String>,
    rows: Vec<Vec<f64>>,
}

fn read(path: &str) -> anyhow::Result<Samples> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .with_context(|| format!("{path} is empty"))?
        .split(',')
        .map(str::to_string)
        .collect();
    anyhow::ensure!(
        header.len() >= 6 && header[0] == "at_s" && header[2] == "rss_kib",
        "{path} is not a bench samples CSV (header {header:?})"
    );
    let rows = lines
        .enumerate()
        .map(|(i, l)| {
            let row: Vec<f64> = l
                .split(',')
                .map(|v| v.parse::<f64>())
                .collect::<Result<_, _>>()
                .with_context(|| format!("{path}:{}: not numbers: {l}", i + 2))?;
            anyhow::ensure!(
                row.len() == header.len(),
                "{path}:{}: {} columns, the header has {}",
                i + 2,
                row.len(),
                header.len()
            );
            // NaN or infinity would send the axis arithmetic into an endless loop.
            anyhow::ensure!(
                row.iter().all(|v| v.is_finite() && *v >= 0.0),
                "{path}:{}: a value is negative, NaN or infinite: {l}",
                i + 2
            );
            Ok(row)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(rows.len() >= 2, "{path} has fewer than 2 samples");
    anyhow::ensure!(
        rows.windows(2).all(|w| w[1][0] > w[0][0]),
        "{path}: at_s must increase from each sample to the next"
    );
    Ok(Samples { header, rows })
}

/// The rate per second of counter column `c`, over windows of at least 1 s.
fn rate(s: &Samples, c: usize) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut from = &s.rows[0];
    for r in &s.rows[1..] {
        let dt = r[0] - from[0];
        if dt >= 1.0 {
            out.push((r[0], (r[c] - from[c]).max(0.0) / dt));
            from = r;
        }
    }
    out
}

/// Exit 1 with the error's chain on one line (no backtrace: these are input errors).
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plot-samples: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (input, output, title) = match args.as_slice() {
        [input, output] => (input, output, input.as_str()),
        [input, output, title] => (input, output, title.as_str()),
        _ => anyhow::bail!("usage: plot-samples SAMPLES.csv OUT.png [TITLE]"),
    };
    if let Some(dir) = std::path::Path::new(output).parent() {
        anyhow::ensure!(
            dir.as_os_str().is_empty() || dir.is_dir(),
            "cannot write {output}: {} is not a directory",
            dir.display()
        );
    }
    let font_path = std::env::var("PLOT_FONT").unwrap_or_else(|_| DEFAULT_FONT.to_string());
    let font = std::fs::read(&font_path)
        .with_context(|| format!("cannot read the font {font_path} (set PLOT_FONT)"))?;
    plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font.into_boxed_slice()),
    )
    .map_err(|_| anyhow::anyhow!("{font_path} is not a TrueType font"))?;
    let s = read(input)?;
    let end = s.rows.last().expect("2 samples")[0];
    let gauges: Vec<usize> = (6..s.header.len()).collect();
    let panels = if gauges.is_empty() { 2 } else { 3 };
    let root = BitMapBackend::new(output, (1000, 300 * panels as u32 + 40)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let areas = root.split_evenly((panels, 1));

    let rss: Vec<(f64, f64)> = s.rows.iter().map(|r| (r[0], r[2] / 1024.0)).collect();
    let top = rss.iter().map(|p| p.1).fold(0.0, f64::max) * 1.1;
    let mut c = ChartBuilder::on(&areas[0])
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..top.max(1.0))?;
    c.configure_mesh()
        .x_desc("seconds")
        .y_desc("RSS (MiB)")
        .draw()?;
    c.draw_series(LineSeries::new(rss, &BLUE))?
        .label("resident memory")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE));
    c.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;

    let mut series: Vec<(String, Vec<(f64, f64)>)> = vec![(s.header[3].clone(), rate(&s, 3))];
    if s.header[5] != s.header[3] {
        series.push((s.header[5].clone(), rate(&s, 5)));
    }
    lines(&areas[1], end, "per second", &series)?;
    if !gauges.is_empty() {
        let series: Vec<(String, Vec<(f64, f64)>)> = gauges
            .iter()
            .filter(|&&g| s.header[g] != "buffered_bytes")
            .map(|&g| {
                (
                    s.header[g].clone(),
                    s.rows.iter().map(|r| (r[0], r[g])).collect(),
                )
            })
            .collect();
        lines(&areas[2], end, "gauge", &series)?;
    }
    root.present()
        .with_context(|| format!("cannot write {output}"))?;
    println!("wrote {output}");
    Ok(())
}

/// One panel of named lines.
fn lines(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    end: f64,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> anyhow::Result<()> {
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        * 1.1;
    let mut c = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..end, 0.0..top.max(1.0))?;
    c.configure_mesh().x_desc("seconds").y_desc(y_desc).draw()?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        c.draw_series(LineSeries::new(points.clone(), color))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
    }
    c.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Samples plotters cannot draw (a NaN sent its axis arithmetic into an endless loop)
    /// are refused with the file and line, before any drawing.
    #[test]
    fn refuses_samples_that_cannot_be_drawn() {
        let dir = std::env::temp_dir().join(format!("plot-samples-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let header = "at_s,cpu_s,rss_kib,a,a,b\n";
        for (rows, want) in [
            (
                "0.1,0,NaN,1,1,1\n0.2,0,1,1,1,1\n",
                ":2: a value is negative, NaN or infinite",
            ),
            (
                "0.1,0,1,1,1,1\n0.2,0,inf,1,1,1\n",
                ":3: a value is negative, NaN or infinite",
            ),
            ("0.1,0,-1,1,1,1\n0.2,0,1,1,1,1\n", ":2: a value is negative"),
            ("0.2,0,1,1,1,1\n0.1,0,1,1,1,1\n", "at_s must increase"),
            ("0.1,0,1,1,1,1\n", "fewer than 2 samples"),
            (
                "0.1,0,1,1,1\n0.2,0,1,1,1,1\n",
                ":2: 5 columns, the header has 6",
            ),
        ] {
            let path = dir.join("s.csv");
            std::fs::write(&path, format!("{header}{rows}")).unwrap();
            let path = path.to_str().unwrap();
            let Err(e) = super::read(path) else {
                panic!("accepted {rows:?}");
            };
            let e = format!("{e:#}");
            assert!(e.contains(path) && e.contains(want), "{rows:?}: {e}");
        }
        let path = dir.join("ok.csv");
        std::fs::write(&path, format!("{header}0.1,0,1,1,1,1\n0.2,0,2,3,3,1\n")).unwrap();
        assert_eq!(super::read(path.to_str().unwrap()).unwrap().rows.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
