//! The layouts `order --evaluate` scored before linking.

use crate::bars::{Bar, BarChart, Group};
use crate::input::Inputs;
use crate::svg::esc;
use crate::table::Table;
use crate::Section;

/// The layouts `order --evaluate` scored for a held-out start-up: page faults and pages read.
pub fn section(inputs: &Inputs) -> Option<Section> {
    let evals: Vec<_> = inputs.evaluations().collect();
    if evals.is_empty() {
        return None;
    }
    let mut html = String::from(
        "<p>Each layout scored before linking on a start-up nobody profiled (the held-out \
         profile): page faults and pages read under the page model. <b>default</b> is the \
         binary as linked, <b>ideal</b> the held-out start-up's own order, which no order can \
         beat.</p>",
    );
    let mut table = Table::new(
        "layouts",
        &["file", "holdout", "layout", "pages_touched", "faults", "pages_read", "best"],
    );
    for (src, e) in &evals {
        let colour = |l: &str| match l {
            "default" => "#7a7a7a",
            "ideal" => "#009e73",
            _ => "#0072b2",
        };
        let group = |metric: &dyn Fn(&crate::input::Cost) -> u64, name: &str| Group {
            label: name.into(),
            bars: e
                .rows
                .iter()
                .map(|r| Bar {
                    key: r.layout.clone(),
                    value: metric(&r.cost) as f64,
                    colour: colour(&r.layout).into(),
                    title: format!("{}: {} {}", r.layout, metric(&r.cost), name),
                    label: Some(metric(&r.cost).to_string()),
                    whisker: None,
                })
                .collect(),
        };
        let faults = BarChart {
            title: &format!("page faults, held-out {} ({})", e.holdout, src.name()),
            y_label: "faults",
            groups: vec![group(&|c| c.faults, "faults")],
            width: (60.0 * e.rows.len() as f64 + 120.0).clamp(320.0, 900.0),
            height: 240.0,
            format: &|v| format!("{v:.0}"),
        }
        .render();
        let read = BarChart {
            title: "pages read",
            y_label: "pages",
            groups: vec![group(&|c| c.pages_read, "pages read")],
            width: (60.0 * e.rows.len() as f64 + 120.0).clamp(320.0, 900.0),
            height: 240.0,
            format: &|v| format!("{v:.0}"),
        }
        .render();
        let rows: Vec<String> =
            e.rows.iter().map(|r| format!("<li><b>{}</b></li>", esc(&r.layout))).collect();
        html.push_str(&format!(
            r#"<div class="row">{faults}{read}</div><details><summary>layouts, left to right</summary><ol>{}</ol></details>"#,
            rows.join("")
        ));
        for r in &e.rows {
            table.push(vec![
                src.name(),
                e.holdout.clone(),
                r.layout.clone(),
                r.cost.pages_touched.to_string(),
                r.cost.faults.to_string(),
                r.cost.pages_read.to_string(),
                e.best.clone(),
            ]);
        }
    }
    html.push_str(&table.html("The figures", false));
    Some(Section {
        id: "layouts".into(),
        title: "Layouts scored before linking (order --evaluate)".into(),
        html,
        tables: vec![table],
    })
}
