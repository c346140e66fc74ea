//! The HTTP side of the app model: an HTTP trigger as the app declares it (its route, its
//! static response, its WAGI settings), the middleware a component lists, and the syntax of
//! routes. The route matcher ([`crate::routing`]), the WAGI executor and the
//! middleware composer read these; they live here so the model does not import the server.

use std::sync::Arc;

use spin_app_format::locked::InheritConfiguration;
use spin_app_format::trigger::StaticResponse;
use spin_app_format::HttpRoute as Route;

/// One HTTP trigger as the router sees it: the app's `[[trigger.http]]` entries that name
/// a component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTrigger {
    /// Trigger id (given, or as Spin names them, e.g. `<component>-http-trigger`).
    pub id: String,
    /// Where the trigger is reachable.
    pub route: Route,
    /// Id of the component that handles the requests (empty for a static response).
    pub component: String,
    /// `static_response` (Spin 3.x): served by the host instead of a component.
    pub static_response: Option<Arc<StaticResponse>>,
    /// `executor = { type = "wagi" }`: the component is a WASI command run as CGI.
    pub wagi: Option<Arc<WagiConfig>>,
}

/// A WAGI trigger's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WagiConfig {
    /// The `argv` template.
    pub argv: String,
}

/// One middleware of a component, as the app lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Middleware {
    /// Where it comes from, for errors (`dependencies.middleware[0]`, and its source).
    pub name: String,
    /// What it inherits from the component.
    pub inherit: Inherit,
    /// Its Wasm.
    pub source: super::Content,
}

/// Which of the component's configuration a middleware inherits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inherit {
    /// Everything (`inherit_configuration = true`).
    All,
    /// These keys only (empty: nothing, the default).
    Some(Vec<String>),
}

impl From<&InheritConfiguration> for Inherit {
    fn from(i: &InheritConfiguration) -> Inherit {
        match i {
            InheritConfiguration::All => Inherit::All,
            InheritConfiguration::Some(keys) => Inherit::Some(keys.clone()),
        }
    }
}

impl Inherit {
    pub(crate) fn allows(&self, capability: &str) -> bool {
        match self {
            Inherit::All => true,
            Inherit::Some(keys) => keys.iter().any(|k| k == capability),
        }
    }
}

/// Prefix reserved for the runtime's built-in endpoints.
pub const WELL_KNOWN_PREFIX: &str = "/.well-known/spin";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    Literal(String),
    Capture(String),
}

/// Checks one route as written; errors say what is wrong with it.
pub fn validate_route(route: &str) -> Result<(), String> {
    parse(route).map(|_| ())
}

fn normalize(route: &str) -> String {
    let mut r = route.trim().to_string();
    if !r.starts_with('/') {
        r.insert(0, '/');
    }
    if let Some(stripped) = r.strip_suffix("/*") {
        r = format!("{stripped}/...");
    } else if r == "*" || r == "/*" {
        r = "/...".to_string();
    }
    while r.len() > 1 && r.ends_with('/') {
        r.pop();
    }
    r
}

pub(crate) fn parse(route: &str) -> Result<(String, Vec<Segment>, bool), String> {
    let normalized = normalize(route);
    if normalized == WELL_KNOWN_PREFIX || normalized.starts_with(&format!("{WELL_KNOWN_PREFIX}/")) {
        return Err(format!(
            "routes under {WELL_KNOWN_PREFIX}/ are reserved for the runtime; choose another path"
        ));
    }
    let parts: Vec<&str> = normalized
        .split('/')
        .skip(1)
        .filter(|s| !s.is_empty())
        .collect();
    let mut segments = Vec::new();
    let mut wildcard = false;
    for (i, part) in parts.iter().enumerate() {
        if *part == "..." {
            if i != parts.len() - 1 {
                return Err("`...` is only allowed as the last segment".to_string());
            }
            wildcard = true;
        } else if let Some(name) = part.strip_prefix(':') {
            if name.is_empty() {
                return Err("a `:` capture needs a name, e.g. `/users/:id`".to_string());
            }
            segments.push(Segment::Capture(name.to_string()));
        } else if part.contains('*') {
            return Err(format!(
                "segment `{part}`: `*` is only allowed as a trailing `/*` wildcard"
            ));
        } else {
            segments.push(Segment::Literal(part.to_string()));
        }
    }
    Ok((normalized, segments, wildcard))
}
