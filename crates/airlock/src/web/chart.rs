//! Small charts drawn on the server as SVG: no chart library, no script. Presentation
//! attributes only (the CSP forbids inline styles).

use maud::{html, Markup};

/// One bar: a label, what was used, and the limit (if any).
pub struct Bar<'a> {
    pub label: &'a str,
    pub used: u64,
    pub limit: Option<u64>,
}

const WIDTH: u32 = 320;
const ROW: u32 = 22;

/// Horizontal bars of use against limits; a bar past 80% of its limit is drawn in red.
pub fn bars(rows: &[Bar<'_>]) -> Markup {
    let height = ROW * rows.len() as u32 + 4;
    html! {
        svg class="chart" xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            viewBox=(format!("0 0 {WIDTH} {height}")) role="img" {
            @for (i, r) in rows.iter().enumerate() {
                @let y = i as u32 * ROW + 2;
                @let share = share(r.used, r.limit);
                @let w = (share * 200.0).round() as u32;
                text x="0" y=(y + 14) font-size="12" fill="#1b1f24" { (r.label) }
                rect x="110" y=(y + 3) width="200" height="14" fill="#eceff3" {}
                rect x="110" y=(y + 3) width=(w) height="14"
                    fill=(if share >= 0.8 { "#b3261e" } else { "#1e6b34" }) {}
            }
        }
    }
}

/// The share of `limit` that `used` is, between 0 and 1 (0 without a limit).
pub fn share(used: u64, limit: Option<u64>) -> f64 {
    match limit {
        Some(l) if l > 0 => (used as f64 / l as f64).clamp(0.0, 1.0),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_are_bounded_and_labels_escaped() {
        assert_eq!(share(5, Some(10)), 0.5);
        assert_eq!(share(50, Some(10)), 1.0);
        assert_eq!(share(5, None), 0.0);
        let svg = bars(&[Bar {
            label: "<b>turns</b>",
            used: 9,
            limit: Some(10),
        }])
        .into_string();
        assert!(svg.contains("&lt;b&gt;turns"), "{svg}");
        assert!(svg.contains("#b3261e"), "{svg}");
    }
}
