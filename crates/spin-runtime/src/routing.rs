//! Spin's HTTP routing: which component answers a request path.
//!
//! Rules (as `spin up`): a leading `/` is added and a trailing `/` dropped; `/...` (or
//! `/*`) at the end is a wildcard matching the prefix and everything below it; `:name`
//! captures one segment; an exact route beats a wildcard; among matches the longest
//! route wins regardless of order, and a literal segment beats a capture; a duplicate
//! route is replaced by the later one (with a warning); private routes are not
//! reachable; `/.well-known/spin/` is reserved for the built-in endpoints.

use std::sync::Arc;

use spin_app_format::trigger::StaticResponse;
use spin_app_format::HttpRoute as Route;

use crate::app::http_trigger::{parse, Segment};
pub use crate::app::http_trigger::{validate_route, HttpTrigger, WELL_KNOWN_PREFIX};

#[derive(Debug, Clone)]
struct Entry {
    /// The route as written in the manifest.
    raw: String,
    /// Normalized route (leading `/`, no trailing `/`, `/*` spelled `/...`).
    normalized: Arc<str>,
    /// `normalized` without a trailing `/...`.
    component_route: Arc<str>,
    segments: Vec<Segment>,
    wildcard: bool,
    component: Arc<str>,
    static_response: Option<Arc<StaticResponse>>,
}

/// The result of routing one request. The route's own strings are shared with the table
/// (a request clones a reference count, not the strings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteMatch {
    /// The component that handles the request (empty for a static response).
    pub component: Arc<str>,
    /// The trigger's `static_response`, served instead of a component.
    pub static_response: Option<Arc<StaticResponse>>,
    /// The route as the app declared it, normalized (e.g. `/hello/...`): the
    /// `spin-matched-route` and `spin-raw-component-route` headers.
    pub route: Arc<str>,
    /// The route without a trailing `/...` (`spin-component-route`).
    pub component_route: Arc<str>,
    /// The part of the path matched by the wildcard (`spin-path-info`), empty for exact
    /// routes.
    pub path_info: String,
    /// `:name` captures in route order.
    pub captures: Vec<(String, String)>,
}

/// A routing table built from an app's HTTP triggers.
#[derive(Debug, Clone, Default)]
pub struct Router {
    /// Entries ordered best-first.
    entries: Vec<Entry>,
}

/// Compares specificity: `Less` means `a` is the better match.
fn rank(a: &Entry, b: &Entry) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    // Exact beats wildcard.
    match (a.wildcard, b.wildcard) {
        (false, true) => return Ordering::Less,
        (true, false) => return Ordering::Greater,
        _ => {}
    }
    // Longer wins.
    match b.segments.len().cmp(&a.segments.len()) {
        Ordering::Equal => {}
        other => return other,
    }
    // Literal beats capture, leftmost first.
    for (sa, sb) in a.segments.iter().zip(&b.segments) {
        match (sa, sb) {
            (Segment::Literal(_), Segment::Capture(_)) => return Ordering::Less,
            (Segment::Capture(_), Segment::Literal(_)) => return Ordering::Greater,
            _ => {}
        }
    }
    Ordering::Equal
}

impl Router {
    /// Builds the table. Private triggers are left out; a duplicate route keeps the last
    /// trigger and logs a warning. Invalid routes are an error naming the trigger.
    pub fn build(triggers: &[HttpTrigger]) -> anyhow::Result<Router> {
        let mut entries: Vec<Entry> = Vec::new();
        for t in triggers {
            let Route::Path(raw) = &t.route else {
                continue;
            };
            let (normalized, segments, wildcard) = parse(raw)
                .map_err(|e| anyhow::anyhow!("http trigger `{}` route `{raw}`: {e}", t.id))?;
            let component_route = normalized
                .strip_suffix("/...")
                .unwrap_or(&normalized)
                .into();
            let entry = Entry {
                raw: raw.clone(),
                normalized: normalized.into(),
                component_route,
                segments,
                wildcard,
                component: t.component.as_str().into(),
                static_response: t.static_response.clone(),
            };
            if let Some(existing) = entries
                .iter_mut()
                .find(|e| e.normalized == entry.normalized)
            {
                tracing::warn!(
                    "duplicate route `{}`: component `{}` replaces `{}` (the last one wins)",
                    entry.raw,
                    entry.component,
                    existing.component
                );
                *existing = entry;
            } else {
                entries.push(entry);
            }
        }
        entries.sort_by(rank);
        Ok(Router { entries })
    }

    /// Routes a request path (no query). `None` means 404.
    pub fn route(&self, path: &str) -> Option<RouteMatch> {
        let mut parts: Vec<&str> = path.split('/').collect();
        // Leading "" (path starts with '/') and a trailing "" (trailing '/').
        if parts.first() == Some(&"") {
            parts.remove(0);
        }
        if parts.last() == Some(&"") {
            parts.pop();
        }
        'entries: for e in &self.entries {
            let n = e.segments.len();
            if parts.len() < n || (!e.wildcard && parts.len() != n) {
                continue;
            }
            let mut captures = Vec::new();
            for (seg, part) in e.segments.iter().zip(&parts) {
                match seg {
                    Segment::Literal(l) if l == part => {}
                    Segment::Literal(_) => continue 'entries,
                    Segment::Capture(name) => captures.push((name.clone(), (*part).to_string())),
                }
            }
            let path_info = if e.wildcard {
                let rest: Vec<&str> = path.trim_start_matches('/').split('/').skip(n).collect();
                if rest.is_empty() || (rest.len() == 1 && rest[0].is_empty() && n > 0) {
                    String::new()
                } else {
                    format!("/{}", rest.join("/"))
                }
            } else {
                String::new()
            };
            return Some(RouteMatch {
                component: e.component.clone(),
                static_response: e.static_response.clone(),
                route: e.normalized.clone(),
                component_route: e.component_route.clone(),
                path_info,
                captures,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(routes: &[(&str, &str)]) -> Router {
        let triggers: Vec<HttpTrigger> = routes
            .iter()
            .enumerate()
            .map(|(i, (r, c))| HttpTrigger {
                id: format!("t{i}"),
                route: if *r == "private" {
                    Route::Private
                } else {
                    Route::Path(r.to_string())
                },
                component: c.to_string(),
                static_response: None,
                wagi: None,
            })
            .collect();
        Router::build(&triggers).unwrap()
    }

    fn comp(r: &Router, path: &str) -> Option<String> {
        r.route(path).map(|m| m.component.to_string())
    }

    #[test]
    fn exact_beats_wildcard_regardless_of_order() {
        let r = router(&[("/foo/...", "wild"), ("/foo", "exact")]);
        assert_eq!(comp(&r, "/foo").as_deref(), Some("exact"));
        assert_eq!(comp(&r, "/foo/bar").as_deref(), Some("wild"));
        let r = router(&[("/foo", "exact"), ("/foo/...", "wild")]);
        assert_eq!(comp(&r, "/foo").as_deref(), Some("exact"));
    }

    #[test]
    fn longest_wildcard_wins() {
        let r = router(&[("/...", "root"), ("/a/b/...", "ab"), ("/a/...", "a")]);
        assert_eq!(comp(&r, "/a/b/c").as_deref(), Some("ab"));
        assert_eq!(comp(&r, "/a/x").as_deref(), Some("a"));
        assert_eq!(comp(&r, "/a").as_deref(), Some("a"));
        assert_eq!(comp(&r, "/zzz").as_deref(), Some("root"));
        assert_eq!(comp(&r, "/").as_deref(), Some("root"));
    }

    #[test]
    fn no_match_is_none() {
        let r = router(&[("/foo", "f"), ("/bar/...", "b")]);
        assert_eq!(comp(&r, "/foo/x"), None);
        assert_eq!(comp(&r, "/"), None);
        assert_eq!(comp(&r, "/barn"), None);
    }

    #[test]
    fn captures_and_literal_preference() {
        let r = router(&[("/users/:id", "byid"), ("/users/me", "me")]);
        let m = r.route("/users/42").unwrap();
        assert_eq!(&*m.component, "byid");
        assert_eq!(m.captures, vec![("id".to_string(), "42".to_string())]);
        assert_eq!(comp(&r, "/users/me").as_deref(), Some("me"));
        assert_eq!(comp(&r, "/users"), None);
    }

    #[test]
    fn path_info_and_component_route() {
        let r = router(&[("static/*", "s"), ("/...", "root")]);
        let m = r.route("/static/a/b.txt").unwrap();
        assert_eq!(&*m.route, "/static/...");
        assert_eq!(&*m.component_route, "/static");
        assert_eq!(m.path_info, "/a/b.txt");
        assert_eq!(r.route("/static").unwrap().path_info, "");
        let m = r.route("/x/y").unwrap();
        assert_eq!((&*m.component_route, m.path_info.as_str()), ("", "/x/y"));
        assert_eq!(r.route("/").unwrap().path_info, "/");
    }

    #[test]
    fn normalization_and_trailing_slash() {
        let r = router(&[("hello/", "h")]);
        assert_eq!(&*r.route("/hello").unwrap().route, "/hello");
        assert_eq!(comp(&r, "/hello/").as_deref(), Some("h"));
    }

    #[test]
    fn duplicate_last_wins_and_private_unreachable() {
        let r = router(&[("/dup", "first"), ("/dup/", "second"), ("private", "p")]);
        assert_eq!(comp(&r, "/dup").as_deref(), Some("second"));
        assert_eq!(r.entries.len(), 1);
    }

    #[test]
    fn reserved_and_malformed_routes_rejected() {
        assert!(validate_route("/.well-known/spin/x")
            .unwrap_err()
            .contains("reserved"));
        assert!(validate_route("/.well-known/spin").is_err());
        assert!(validate_route("/.well-known/other").is_ok());
        assert!(validate_route("/a/.../b")
            .unwrap_err()
            .contains("last segment"));
        assert!(validate_route("/a/:").unwrap_err().contains("needs a name"));
        assert!(validate_route("/a*b").is_err());
    }
}
