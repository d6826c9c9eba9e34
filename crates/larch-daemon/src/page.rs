//! The Analytics page's files, compiled into the binary: served by [`crate::http`] at `/`,
//! and put together into one self-contained report page for a simulation's output
//! (`larch sim run --html`), which any browser opens with no daemon and no network.

/// `/`.
pub const INDEX_HTML: &str = include_str!("../assets/index.html");
/// `/app.js`: the page's logic.
pub const APP_JS: &str = include_str!("../assets/app.js");
/// `/chart.js`: the charts, drawn on canvas.
pub const CHART_JS: &str = include_str!("../assets/chart.js");
/// `/style.css`.
pub const STYLE_CSS: &str = include_str!("../assets/style.css");

/// Text safe inside a `<script>` element: `</` cannot end it early.
fn script_safe(text: &str) -> String {
    text.replace("</", "<\\/")
}

/// One page holding the Analytics page's files and `data_json` (a simulation's output, in
/// the form docs/simulator.md gives), which the page shows instead of asking a daemon.
pub fn report(title: &str, data_json: &str) -> String {
    let escaped_title: String = title
        .chars()
        .map(|c| match c {
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '&' => "&amp;".to_string(),
            '"' => "&quot;".to_string(),
            c => c.to_string(),
        })
        .collect();
    let data = format!(
        "<script>window.LARCH_STATIC = {};</script>",
        script_safe(data_json)
    );
    INDEX_HTML
        .replace(
            "<title>larch Analytics</title>",
            &format!("<title>larch simulation · {escaped_title}</title>"),
        )
        .replace(
            "<link rel=\"stylesheet\" href=\"/style.css\">",
            &format!("<style>\n{STYLE_CSS}</style>"),
        )
        .replace(
            "<script src=\"/chart.js\"></script>",
            &format!("{data}\n<script>\n{}</script>", script_safe(CHART_JS)),
        )
        .replace(
            "<script src=\"/app.js\"></script>",
            &format!("<script>\n{}</script>", script_safe(APP_JS)),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_inlines_every_file_and_its_data_cannot_close_the_script() {
        let page = report("run <1>", r#"{"pool": "</script><b>x"}"#);
        assert!(page.contains("<title>larch simulation · run &lt;1&gt;</title>"));
        assert!(!page.contains("src=\"/"), "a file is still linked");
        assert!(!page.contains("href=\"/style.css\""));
        assert!(page.contains("window.LARCH_STATIC = {\"pool\": \"<\\/script><b>x\"}"));
        assert!(page.contains("const Charts"));
        assert!(page.contains("function start()"));
    }
}
