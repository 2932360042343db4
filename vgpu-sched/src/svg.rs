//! One period of a plan drawn as a timeline: a lane per instance with its runs, labelled with
//! the instance, its weight and its share. People would rather look than read.

use std::fmt::Write as _;

use crate::plan::Plan;
use crate::software::period_runs;

const WIDTH: f64 = 900.0;
const LABEL_WIDTH: f64 = 330.0;
const RIGHT_MARGIN: f64 = 20.0;
const TOP: f64 = 56.0;
const LANE_HEIGHT: f64 = 40.0;
const BAR_HEIGHT: f64 = 24.0;
const AXIS_HEIGHT: f64 = 40.0;
/// Colour-blind friendly (Okabe-Ito), repeated past eight instances.
const PALETTE: [&str; 8] = [
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000",
];

/// The SVG document for one period of `plan`. Pure and deterministic (golden-file tested).
pub fn timeline(plan: &Plan) -> String {
    let runs = period_runs(plan);
    let has_unallocated = runs.iter().any(|run| run.instance.is_none());
    let lanes = plan.instances.len() + usize::from(has_unallocated);
    let height = TOP + LANE_HEIGHT * lanes as f64 + AXIS_HEIGHT;
    let track = WIDTH - LABEL_WIDTH - RIGHT_MARGIN;
    let period = f64::from(plan.period_us.max(1));
    let x_of = |us: u64| LABEL_WIDTH + track * us as f64 / period;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Verdana, sans-serif" font-size="12">"#
    );
    let slice = plan.time_slice_us.map_or_else(
        || "default time slice".to_owned(),
        |us| format!("time slice {}", ms(u64::from(us))),
    );
    let _ = writeln!(
        svg,
        r##"<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">{}</text>"#,
        escape(&format!(
            "{}: {} policy, one period of {}, {}",
            plan.parent,
            plan.policy,
            ms(u64::from(plan.period_us)),
            slice
        ))
    );
    let _ = writeln!(
        svg,
        r##"<text x="10" y="42" fill="#555555">Each lane is one instance; filled blocks are its runs, hollow blocks a slot it keeps while idle.</text>"##
    );

    for (lane, planned) in plan.instances.iter().enumerate() {
        let y = TOP + LANE_HEIGHT * lane as f64;
        let colour = PALETTE[lane % PALETTE.len()];
        if lane % 2 == 0 {
            let _ = writeln!(
                svg,
                r##"<rect x="0" y="{y}" width="{WIDTH}" height="{LANE_HEIGHT}" fill="#f4f4f4"/>"##
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="10" y="{}" font-family="DejaVu Sans Mono, monospace" font-size="11">{}</text>"#,
            y + 16.0,
            escape(&planned.id.to_string())
        );
        let mut detail = format!(
            "weight {} · {} · {}",
            planned.weight,
            planned.share,
            ms(u64::from(planned.slice_us))
        );
        if let Some(min) = planned.min_share {
            let _ = write!(detail, " · min {min}");
        }
        if let Some(max) = planned.max_share {
            let _ = write!(detail, " · max {max}");
        }
        if !planned.busy {
            detail.push_str(" · idle");
        }
        let _ = writeln!(
            svg,
            r##"<text x="10" y="{}" fill="#333333">{}</text>"##,
            y + 32.0,
            escape(&detail)
        );
        for run in runs.iter().filter(|run| run.instance == Some(lane)) {
            let fill = if run.used {
                format!(r#"fill="{colour}""#)
            } else {
                format!(r#"fill="none" stroke="{colour}" stroke-dasharray="3 2""#)
            };
            let _ = writeln!(
                svg,
                r#"<rect x="{:.2}" y="{}" width="{:.2}" height="{BAR_HEIGHT}" {fill}/>"#,
                x_of(run.start_us),
                y + (LANE_HEIGHT - BAR_HEIGHT) / 2.0,
                track * run.len_us as f64 / period
            );
        }
    }
    if has_unallocated {
        let y = TOP + LANE_HEIGHT * plan.instances.len() as f64;
        let _ = writeln!(
            svg,
            r##"<text x="10" y="{}" fill="#555555">unallocated (every instance at its cap) · {}</text>"##,
            y + 24.0,
            plan.unallocated()
        );
        for run in runs.iter().filter(|run| run.instance.is_none()) {
            let _ = writeln!(
                svg,
                r##"<rect x="{:.2}" y="{}" width="{:.2}" height="{BAR_HEIGHT}" fill="#bbbbbb"/>"##,
                x_of(run.start_us),
                y + (LANE_HEIGHT - BAR_HEIGHT) / 2.0,
                track * run.len_us as f64 / period
            );
        }
    }

    let axis_y = TOP + LANE_HEIGHT * lanes as f64 + 8.0;
    let _ = writeln!(
        svg,
        r##"<line x1="{LABEL_WIDTH}" y1="{axis_y}" x2="{}" y2="{axis_y}" stroke="#333333"/>"##,
        LABEL_WIDTH + track
    );
    for tick in 0..=10u64 {
        let us = u64::from(plan.period_us) * tick / 10;
        let x = x_of(us);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.2}" y1="{axis_y}" x2="{x:.2}" y2="{}" stroke="#333333"/>"##,
            axis_y + 5.0
        );
        let _ = writeln!(
            svg,
            r#"<text x="{x:.2}" y="{}" text-anchor="middle" font-size="10">{}</text>"#,
            axis_y + 18.0,
            ms(us)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// µs as `25 ms` or `2.5 ms`.
fn ms(us: u64) -> String {
    if us % 1000 == 0 {
        format!("{} ms", us / 1000)
    } else {
        let text = format!("{:.3}", us as f64 / 1000.0);
        format!("{} ms", text.trim_end_matches('0').trim_end_matches('.'))
    }
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{InstanceSchedule, ParentSchedule};
    use crate::plan::Busy;
    use crate::share::Share;

    #[test]
    fn names_are_escaped_and_every_instance_has_a_lane() {
        let parent = ParentSchedule::new("<gpu & co>").with_period_us(10_000);
        let capped = InstanceSchedule::new("a\"b").with_max_share(Share::from_percent(40).unwrap());
        let plan = Plan::compute(&parent, &[capped], Busy::All).unwrap();
        let svg = timeline(&plan);
        assert!(svg.contains("&lt;gpu &amp; co&gt;"));
        assert!(svg.contains("a&quot;b"));
        assert!(!svg.contains("<gpu"));
        assert!(svg.contains("unallocated"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(ms(25_000), "25 ms");
        assert_eq!(ms(2_500), "2.5 ms");
        assert_eq!(ms(3_333), "3.333 ms");
        assert_eq!(ms(0), "0 ms");
    }
}
