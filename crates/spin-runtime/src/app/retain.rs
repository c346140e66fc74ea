//! Selective deployment (`SPIN_COMPONENTS_TO_RETAIN`, set by spin-operator from a SpinApp's
//! `components`), with Spin's rules (crate `spin-app` `retain_components` and
//! `validate_service_chaining_for_components`): every named component must exist; a
//! retained component may not chain to a dropped one (`http://<id>.spin.internal`) nor use
//! wildcard chaining (`http://*.spin.internal`); templated hosts are not checked; the
//! triggers of dropped components and the dropped components go away.

use std::collections::BTreeSet;

use anyhow::bail;

use super::App;

/// Container environment variable listing the components to serve (comma-separated).
pub const COMPONENTS_TO_RETAIN_ENV: &str = spin_shim_settings::container::COMPONENTS_TO_RETAIN;

/// The `<name>` of an `allowed_outbound_hosts` entry `scheme://<name>.spin.internal[:port]`.
fn chaining_target(entry: &str) -> Option<&str> {
    if entry.contains("{{") {
        return None;
    }
    let rest = entry.split_once("://").map(|(_, r)| r).unwrap_or(entry);
    let host = rest.split(['/', ':']).next()?;
    host.strip_suffix(".spin.internal")
}

/// Parses the variable's value: component ids separated by commas (spaces trimmed, empty
/// items ignored).
pub fn parse_retain_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

impl App {
    /// Keeps only the components in `retain` and the triggers that use them (Spin's
    /// selective deployment), or fails naming the component and the fix.
    pub fn retain_components(&mut self, retain: &[String]) -> anyhow::Result<()> {
        let keep: BTreeSet<&str> = retain.iter().map(String::as_str).collect();
        for id in &keep {
            if !self.components.contains_key(*id) {
                bail!(
                    "{COMPONENTS_TO_RETAIN_ENV}: specified component \"{id}\" not found in \
                     application (components: {})",
                    self.components
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        for t in &self.http_triggers {
            if !keep.contains(t.component.as_str()) {
                continue;
            }
            let Some(c) = self.components.get(&t.component) else {
                continue;
            };
            for entry in &c.allowed_outbound_hosts {
                match chaining_target(entry) {
                    Some("*") => bail!(
                        "{COMPONENTS_TO_RETAIN_ENV}: selected component '{}' cannot use wildcard \
                         service chaining: allowed_outbound_hosts = [\"http://*.spin.internal\"]",
                        c.id
                    ),
                    Some(target) if !keep.contains(target) => bail!(
                        "{COMPONENTS_TO_RETAIN_ENV}: selected component '{}' cannot use service \
                         chaining to unselected component: allowed_outbound_hosts = \
                         [\"http://{target}.spin.internal\"] (retain '{target}' as well)",
                        c.id
                    ),
                    _ => {}
                }
            }
        }
        self.http_triggers
            .retain(|t| keep.contains(t.component.as_str()));
        self.event_triggers.retain(|c| keep.contains(c));
        let used: BTreeSet<String> = self
            .http_triggers
            .iter()
            .map(|t| t.component.clone())
            .chain(
                self.event_triggers
                    .components()
                    .map(|(_, _, c)| c.to_string()),
            )
            .collect();
        self.components.retain(|id, _| used.contains(id));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chaining_targets() {
        assert_eq!(chaining_target("http://back.spin.internal"), Some("back"));
        assert_eq!(
            chaining_target("http://back.spin.internal:80"),
            Some("back")
        );
        assert_eq!(chaining_target("http://*.spin.internal"), Some("*"));
        assert_eq!(chaining_target("https://example.com"), None);
        assert_eq!(chaining_target("http://{{ h }}.spin.internal"), None);
        assert_eq!(parse_retain_list(" a, b,,"), vec!["a", "b"]);
    }
}
