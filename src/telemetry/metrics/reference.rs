//! The metrics reference page of the book, rendered from the figures `/metrics` serves: each
//! family's name, type, labels and help, as the registry declares them.

use super::{method_label, Metrics};
use std::time::Duration;

/// What the page says before its tables.
const PREAMBLE: &str = "# Metrics reference

<!-- Rendered from src/telemetry/metrics/mod.rs: edit the declarations there, then run
`UPDATE_REFERENCE=1 cargo test --lib metrics_reference` to write this page again. -->

Every figure `/metrics` serves (OpenMetrics text), with its type, its labels and its help text
as the proxy declares them. A counter's samples end in `_total`; a histogram's are
`_bucket{le}`, `_sum` and `_count`. What the figures are for, and how to read them:
[Metrics](../operations/metrics.md).
";

/// One metric family as the exposition declares it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Family {
    name: String,
    kind: String,
    help: String,
    labels: Vec<String>,
}

impl Family {
    /// The name a query uses: a counter's samples carry `_total`.
    fn sample_name(&self) -> String {
        match self.kind.as_str() {
            "counter" => format!("{}_total", self.name),
            _ => self.name.clone(),
        }
    }

    fn per_server(&self) -> bool {
        self.labels.iter().any(|label| label == "server")
    }

    fn row(&self) -> String {
        let labels = self.labels.join(", ");
        let help = self.help.replace('|', "\\|");
        format!(
            "| `{}` | {} | {} | {} |\n",
            self.sample_name(),
            self.kind,
            labels,
            help
        )
    }
}

/// A registry with a sample in every family, so that each shows its labels.
fn exposition() -> String {
    let metrics = Metrics::default();
    let server = metrics.server("default");
    server.record_request(method_label("tools/call"), 200, Duration::ZERO);
    server.member("member", super::MemberEvent::Down);
    server.member("member", super::MemberEvent::NameCollision);
    server.member_violation("member", "answer");
    metrics.auth.refuse("missing");
    metrics.store.masters_are(vec!["127.0.0.1:6379".into()]);
    metrics
        .store
        .nodes_are(vec![("127.0.0.1:6379".into(), true)]);
    metrics
        .store
        .round_trip("127.0.0.1:6379", std::time::Duration::from_millis(1));
    metrics.store.node_error("127.0.0.1:6379");
    metrics
        .sandbox
        .unenforced
        .get_or_create(&vec![
            ("server", "default".to_owned()),
            ("what", "landlock_tcp_ports".to_owned()),
        ])
        .set(1);
    metrics.render()
}

/// The names of the labels of one sample line, `le` (a histogram's bucket bound) left out.
fn label_names(sample: &str) -> Vec<String> {
    let Some(inside) = sample
        .split_once('{')
        .and_then(|(_, rest)| rest.rsplit_once('}'))
        .map(|(inside, _)| inside)
    else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut rest = inside;
    while let Some((name, value)) = rest.split_once("=\"") {
        let name = name.trim_start_matches(',').trim();
        if name != "le" {
            names.push(name.to_owned());
        }
        rest = value_end(value);
    }
    names
}

/// What follows a quoted label value (its escapes skipped).
fn value_end(value: &str) -> &str {
    let mut escaped = false;
    for (at, character) in value.char_indices() {
        match character {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return &value[at + 1..],
            _ => escaped = false,
        }
    }
    ""
}

/// Every family of an OpenMetrics exposition, in the order it declares them.
fn families(text: &str) -> Vec<Family> {
    let mut families: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(declared) = line.strip_prefix("# HELP ") {
            let (name, help) = declared.split_once(' ').unwrap_or((declared, ""));
            families.push(Family {
                name: name.to_owned(),
                help: help.to_owned(),
                ..Family::default()
            });
        } else if let Some(declared) = line.strip_prefix("# TYPE ") {
            if let (Some(family), Some((_, kind))) = (families.last_mut(), declared.split_once(' '))
            {
                family.kind = kind.to_owned();
            }
        } else if !line.starts_with('#') {
            if let Some(family) = families
                .last_mut()
                .filter(|family| family.labels.is_empty())
            {
                family.labels = label_names(line);
            }
        }
    }
    families
}

fn table(title: &str, families: &[&Family]) -> String {
    let mut out = format!("\n## {title}\n\n| metric | type | labels | what |\n|---|---|---|---|\n");
    for family in families {
        out.push_str(&family.row());
    }
    out
}

/// The book's metrics reference (`docs/src/reference/metrics.md`): every family `/metrics`
/// serves, per-server ones first, each with its type, labels and help.
pub fn reference_markdown() -> String {
    let families = families(&exposition());
    let (per_server, process_wide): (Vec<&Family>, Vec<&Family>) =
        families.iter().partition(|family| family.per_server());
    let mut out = PREAMBLE.to_owned();
    out.push_str(&table(
        "Per served server (`server`: `default` for `/mcp`, else the gateway server's name)",
        &per_server,
    ));
    out.push_str(&table("Process-wide", &process_wide));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "docs/src/reference/metrics.md";

    /// The book's page is the rendering of the declarations; `UPDATE_REFERENCE=1` writes it.
    #[test]
    fn metrics_reference_page_is_rendered_from_the_declarations() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
        let rendered = reference_markdown();
        if std::env::var_os("UPDATE_REFERENCE").is_some() {
            std::fs::write(&path, &rendered).unwrap();
            return;
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some((line, (page, rendering))) = first_difference(&on_disk, &rendered) {
            panic!(
                "{PAGE} is not the rendering of src/telemetry/metrics/mod.rs (line {line}):\n  \
                 page:      {page}\n  rendering: {rendering}\nrun \
                 `UPDATE_REFERENCE=1 cargo test --lib metrics_reference` and commit the page"
            );
        }
    }

    /// The first line (numbered from 1) where two texts differ, with each one's version.
    fn first_difference<'t>(one: &'t str, other: &'t str) -> Option<(usize, (&'t str, &'t str))> {
        let (mut ones, mut others) = (one.lines(), other.lines());
        (1..).find_map(|line| match (ones.next(), others.next()) {
            (None, None) => Some(None),
            (a, b) if a != b => Some(Some((line, (a.unwrap_or("(none)"), b.unwrap_or("(none)"))))),
            _ => None,
        })?
    }

    #[test]
    fn metrics_reference_names_each_family_with_its_labels() {
        let page = reference_markdown();
        for row in [
            "| `mcp_proxy_sessions_open` | gauge | server | Sessions currently open. |",
            "| `mcp_proxy_requests_total` | counter | server, method, status |",
            "| `mcp_proxy_sessions_rejected_total` | counter | server, reason |",
            "| `mcp_proxy_request_duration_seconds` | histogram | server |",
            "| `mcp_proxy_store_up` | gauge |  | 1 while the Redis store answers",
            "| `mcp_proxy_auth_refused_requests_total` | counter | reason |",
        ] {
            assert!(page.contains(row), "{row} in:\n{page}");
        }
    }
}
