//! The locked app: what `spin up` writes as `spin.lock` and `spin registry push` stores as
//! the `application/vnd.fermyon.spin.application.v1+config` layer.
//!
//! The types and their JSON follow Spin's `spin-locked-app` crate (`locked.rs`): the same
//! field names, the same flattening (`LockedComponentSource { content_type, ..ContentRef }`,
//! `ContentPath { ..ContentRef, path }`), the same omission of empty fields, `inline` as
//! standard base64 without padding, and `spin_lock_version` written as 0 unless the app
//! has host requirements (then 1). Unknown fields are ignored on input, as Spin does;
//! unknown `must_understand` entries are refused, as Spin does.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{check_trigger_id, component_id_error};
use crate::untrusted::{check_path_size, json_error, shown, MAX_DOCUMENT_BYTES};

/// Dynamically typed metadata (`metadata`, `host_requirements`).
pub type ValuesMap = serde_json::Map<String, Value>;

/// Host requirement key: the app calls other components through `*.spin.internal`.
pub const SERVICE_CHAINING_KEY: &str = "local_service_chaining";
/// Host requirement key: triggers have dependencies (middleware).
pub const MIDDLEWARE_KEY: &str = "middleware";
/// `must_understand` entry: the host must honour `host_requirements`.
pub const MUST_UNDERSTAND_HOST_REQUIREMENTS: &str = "host_requirements";
/// `must_understand` entry: the host must honour components' `host_requirements`.
pub const MUST_UNDERSTAND_COMPONENT_HOST_REQUIREMENTS: &str = "component_host_requirements";
/// Content type of every Wasm source Spin writes.
pub const WASM_CONTENT_TYPE: &str = "application/wasm";
/// Spin inlines content up to this many bytes into a pushed lock (`content_ref_inline_max_size`).
pub const INLINE_MAX: usize = 128;
/// Checks a file's guest path from a lock: no `..`, and within the path size limits
/// ([`check_path_size`]).
pub fn check_guest_path(path: &str) -> Result<(), String> {
    if path.split('/').any(|c| c == "..") {
        return Err("it contains `..`; guest paths must stay inside the guest's root".into());
    }
    check_path_size(path.as_bytes())
}

/// A fully resolved Spin application.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LockedApp {
    /// `spin_lock_version` as read (0 or 1); on output it is derived (see the module doc).
    pub spin_lock_version: u32,
    /// Fields the host must process if present.
    pub must_understand: Vec<String>,
    /// Application metadata: `name`, `version`, `description`, `authors`, `origin`,
    /// `trigger` (`{type, ..}` when the app has one trigger type), `triggers` (global
    /// trigger settings by type).
    pub metadata: ValuesMap,
    /// Host requirements (entries whose value is `"optional"` are dropped on input).
    pub host_requirements: ValuesMap,
    /// Application variables.
    pub variables: BTreeMap<String, Variable>,
    /// Triggers.
    pub triggers: Vec<LockedTrigger>,
    /// Components.
    pub components: Vec<LockedComponent>,
}

#[derive(Deserialize)]
struct LockedAppWire {
    spin_lock_version: u32,
    #[serde(default)]
    must_understand: Vec<String>,
    #[serde(default)]
    metadata: ValuesMap,
    #[serde(default)]
    host_requirements: ValuesMap,
    #[serde(default)]
    variables: BTreeMap<String, Variable>,
    triggers: Vec<LockedTrigger>,
    components: Vec<LockedComponent>,
}

impl Serialize for LockedApp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let version = if self.must_understand.is_empty() && self.host_requirements.is_empty() {
            0
        } else {
            1
        };
        let mut la = serializer.serialize_struct("LockedApp", 7)?;
        la.serialize_field("spin_lock_version", &version)?;
        if !self.must_understand.is_empty() {
            la.serialize_field("must_understand", &self.must_understand)?;
        }
        if !self.metadata.is_empty() {
            la.serialize_field("metadata", &self.metadata)?;
        }
        if !self.host_requirements.is_empty() {
            la.serialize_field("host_requirements", &self.host_requirements)?;
        }
        if !self.variables.is_empty() {
            la.serialize_field("variables", &self.variables)?;
        }
        la.serialize_field("triggers", &self.triggers)?;
        la.serialize_field("components", &self.components)?;
        la.end()
    }
}

fn drop_optional(map: ValuesMap) -> ValuesMap {
    map.into_iter()
        .filter(|(_, v)| v.as_str() != Some("optional"))
        .collect()
}

impl LockedApp {
    /// Parses a locked app. Errors say what is wrong: not JSON, a missing field, an
    /// unsupported `spin_lock_version`, a `must_understand` entry this reader does not know.
    /// Component ids must pass [`check_component_id`](crate::ids::check_component_id) and file paths [`check_guest_path`]
    /// (they become file names); a lock over [`MAX_DOCUMENT_BYTES`] is refused unread.
    pub fn from_json(bytes: &[u8]) -> anyhow::Result<LockedApp> {
        if bytes.len() as u64 > MAX_DOCUMENT_BYTES {
            bail!(
                "the locked app has {} bytes, more than the limit of {MAX_DOCUMENT_BYTES}",
                bytes.len()
            );
        }
        let wire: LockedAppWire = serde_json::from_slice(bytes)
            .map_err(|e| anyhow!("invalid locked-app JSON: {}", json_error(&e)))?;
        if wire.spin_lock_version > 1 {
            bail!(
                "key `spin_lock_version`: version {} is not supported (0 and 1 are)",
                wire.spin_lock_version
            );
        }
        for m in &wire.must_understand {
            if m != MUST_UNDERSTAND_HOST_REQUIREMENTS
                && m != MUST_UNDERSTAND_COMPONENT_HOST_REQUIREMENTS
            {
                bail!(
                    "key `must_understand`: the app requires `{}`, which this reader does not know",
                    shown(m)
                );
            }
        }
        for (i, t) in wire.triggers.iter().enumerate() {
            check_trigger_id(&t.id).map_err(|e| {
                anyhow!(
                    "key `triggers[{i}].id`: trigger id `{}` is invalid: {e}",
                    shown(&t.id)
                )
            })?;
        }
        for (i, c) in wire.components.iter().enumerate() {
            if let Some(e) = component_id_error(&format!("components[{i}].id"), &c.id) {
                return Err(e);
            }
            for (j, f) in c.files.iter().enumerate() {
                check_guest_path(&f.path).map_err(|e| {
                    anyhow!(
                        "key `components[{i}].files[{j}].path` (component `{}`): path `{}` is refused: {e}",
                        c.id,
                        shown(&f.path)
                    )
                })?;
            }
        }
        let components = wire
            .components
            .into_iter()
            .map(|mut c| {
                c.host_requirements = drop_optional(std::mem::take(&mut c.host_requirements));
                c
            })
            .collect();
        Ok(LockedApp {
            spin_lock_version: wire.spin_lock_version,
            must_understand: wire.must_understand,
            metadata: wire.metadata,
            host_requirements: drop_optional(wire.host_requirements),
            variables: wire.variables,
            triggers: wire.triggers,
            components,
        })
    }

    /// Compact JSON, as `spin registry push` writes the lock layer.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a locked app always serialises")
    }

    /// Pretty JSON, as `spin up` writes `spin.lock`.
    pub fn to_json_pretty(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a locked app always serialises")
    }

    /// A string entry of `metadata`.
    pub fn metadata_str(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).and_then(Value::as_str)
    }

    /// The app-wide settings of one trigger type (`[application.trigger.<type>]`, locked as
    /// `metadata.triggers.<type>`), typed; `None` when the app has none. Errors name the key.
    pub fn trigger_metadata<T: serde::de::DeserializeOwned>(
        &self,
        trigger_type: &str,
    ) -> anyhow::Result<Option<T>> {
        match self
            .metadata
            .get("triggers")
            .and_then(|t| t.get(trigger_type))
        {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| {
                anyhow::anyhow!(
                    "key `metadata.triggers.{t}` ([application.trigger.{t}]): {}",
                    json_error(&e),
                    t = shown(trigger_type)
                )
            }),
        }
    }

    /// The component with this id.
    pub fn component(&self, id: &str) -> Option<&LockedComponent> {
        self.components.iter().find(|c| c.id == id)
    }

    /// Spin's `reassign_trigger_deps`: moves every trigger's `trigger_dependencies` onto the
    /// component it names, so that a component id identifies its composition. A component
    /// used by several triggers, one of which has dependencies, is cloned for each such
    /// trigger as `<component>-for-<trigger id>` (`-d<N>` added when that is taken) and the
    /// trigger is pointed at the clone. The component gets the dependencies, the metadata
    /// `resolve-trigger-dependencies-using = <trigger type>` and, for `middleware`, the host
    /// requirement `middleware = "required"` (with `component_host_requirements` in
    /// `must_understand`). Returns each (clone id, original id).
    pub fn move_trigger_dependencies_to_components(&mut self) -> Vec<(String, String)> {
        fn has_deps(t: &LockedTrigger) -> bool {
            t.trigger_dependencies.values().any(|d| !d.is_empty())
        }
        fn component_of(t: &LockedTrigger) -> Option<String> {
            t.trigger_config
                .get("component")
                .and_then(Value::as_str)
                .map(str::to_string)
        }
        let mut clones = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut disambiguator = 0u32;
        let shared: Vec<String> = {
            let mut ids: Vec<String> = self.triggers.iter().filter_map(component_of).collect();
            ids.sort();
            ids.dedup();
            ids.into_iter()
                .filter(|id| {
                    let users: Vec<&LockedTrigger> = self
                        .triggers
                        .iter()
                        .filter(|t| component_of(t).as_deref() == Some(id))
                        .collect();
                    users.len() > 1 && users.iter().any(|t| has_deps(t))
                })
                .collect()
        };
        for original in shared {
            let Some(template) = self.component(&original).cloned() else {
                continue;
            };
            for t in self.triggers.iter_mut() {
                if component_of(t).as_deref() != Some(original.as_str()) || !has_deps(t) {
                    continue;
                }
                let mut id = format!("{original}-for-{}", t.id);
                if !seen.insert(id.clone()) {
                    disambiguator += 1;
                    id = format!("{id}-d{disambiguator}");
                    seen.insert(id.clone());
                }
                let mut clone = template.clone();
                clone.id.clone_from(&id);
                self.components.push(clone);
                if let Some(config) = t.trigger_config.as_object_mut() {
                    config.insert("component".into(), id.clone().into());
                }
                clones.push((id, original.clone()));
            }
        }
        for t in self.triggers.iter_mut() {
            if !has_deps(t) {
                continue;
            }
            let Some(id) = component_of(t) else { continue };
            let Some(c) = self.components.iter_mut().find(|c| c.id == id) else {
                continue;
            };
            c.trigger_dependencies = std::mem::take(&mut t.trigger_dependencies);
            c.metadata.insert(
                "resolve-trigger-dependencies-using".into(),
                t.trigger_type.clone().into(),
            );
            if c.trigger_dependencies.contains_key(MIDDLEWARE_KEY) {
                c.host_requirements
                    .insert(MIDDLEWARE_KEY.into(), "required".into());
            }
        }
        if self
            .components
            .iter()
            .any(|c| !c.host_requirements.is_empty())
            && !self
                .must_understand
                .iter()
                .any(|m| m == MUST_UNDERSTAND_COMPONENT_HOST_REQUIREMENTS)
        {
            self.must_understand
                .push(MUST_UNDERSTAND_COMPONENT_HOST_REQUIREMENTS.into());
        }
        clones
    }

    /// Host requirements of the app and of the components any trigger uses that are not in
    /// `supported` (Spin's `ensure_needs_only`).
    pub fn unmet_host_requirements(&self, supported: &[&str]) -> Vec<String> {
        let mut unmet: Vec<String> = self
            .host_requirements
            .keys()
            .chain(
                self.components
                    .iter()
                    .flat_map(|c| c.host_requirements.keys()),
            )
            .filter(|k| !supported.contains(&k.as_str()))
            .cloned()
            .collect();
        unmet.sort();
        unmet.dedup();
        unmet
    }
}

/// A fully resolved component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockedComponent {
    /// Application-unique id.
    pub id: String,
    /// `description`, `allowed_outbound_hosts`, `key_value_stores`, `databases`,
    /// `ai_models`, `build`.
    #[serde(default, skip_serializing_if = "ValuesMap::is_empty")]
    pub metadata: ValuesMap,
    /// The Wasm source.
    pub source: LockedComponentSource,
    /// WASI environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Files and directories the component sees.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<ContentPath>,
    /// Component variables (templates kept as written).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    /// Component dependencies (imports satisfied by other components).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dependencies: BTreeMap<String, LockedComponentDependency>,
    /// Trigger dependencies moved onto the component (e.g. `middleware`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub trigger_dependencies: BTreeMap<String, Vec<LockedComponentDependency>>,
    /// Host requirements of this component.
    #[serde(default, skip_serializing_if = "ValuesMap::is_empty")]
    pub host_requirements: ValuesMap,
}

impl LockedComponent {
    /// A string-list entry of `metadata` (absent or null is empty); errors name the key.
    pub fn metadata_list(&self, key: &str) -> anyhow::Result<Vec<String>> {
        match self.metadata.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
                anyhow!(
                    "component `{}`: key `metadata.{key}`: {}",
                    self.id,
                    json_error(&e)
                )
            }),
        }
    }

    /// The component's outbound allow-list. Locks written by Spin 2+ carry
    /// `allowed_outbound_hosts`; a Spin 1 lock's `allowed_http_hosts` is converted as Spin's
    /// manifest compatibility code converts it.
    pub fn allowed_outbound_hosts(&self) -> anyhow::Result<Vec<String>> {
        let hosts = self.metadata_list("allowed_outbound_hosts")?;
        let old = self.metadata_list("allowed_http_hosts")?;
        let converted = crate::hosts::convert_allowed_http_hosts(&old, false).map_err(|e| {
            anyhow!(
                "component `{}`: key `metadata.allowed_http_hosts`: {e}",
                self.id
            )
        })?;
        Ok(hosts.into_iter().chain(converted).collect())
    }
}

/// A dependency satisfied by another component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockedComponentDependency {
    /// Its Wasm.
    pub source: LockedComponentSource,
    /// The export of the dependency to use (Spin writes `null` when none).
    pub export: Option<String>,
    /// Which configuration it inherits from its parent.
    #[serde(default, skip_serializing_if = "InheritConfiguration::is_none")]
    pub inherit: InheritConfiguration,
}

/// Which configuration a dependency inherits (`"All"` or `{"Some": [..]}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum InheritConfiguration {
    /// Everything.
    All,
    /// Only these keys (empty: nothing).
    Some(Vec<String>),
}

impl Default for InheritConfiguration {
    fn default() -> Self {
        InheritConfiguration::Some(Vec::new())
    }
}

impl InheritConfiguration {
    fn is_none(&self) -> bool {
        matches!(self, InheritConfiguration::Some(k) if k.is_empty())
    }
}

/// A Wasm source: `{"content_type": "application/wasm", "source"|"inline"|"digest": ..}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockedComponentSource {
    /// Content type (`application/wasm`).
    pub content_type: String,
    /// Where the bytes are.
    #[serde(flatten)]
    pub content: ContentRef,
}

/// Content mapped to a guest path: `{"source"|"inline"|"digest": .., "path": ..}`.
/// No `content` key: the reference is flattened beside `path`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPath {
    /// Where the bytes are.
    #[serde(flatten)]
    pub content: ContentRef,
    /// Guest path: relative (`static/a.txt`, pushed apps) or absolute (`/`, `spin up`).
    pub path: String,
}

/// Content used by an app. At least one of the fields is set.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ContentRef {
    /// A URI (usually `file://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The content itself (standard base64 without padding in JSON).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "base64_opt")]
    pub inline: Option<Vec<u8>>,
    /// `sha256:<hex>` the content must have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl ContentRef {
    /// A `file://` reference to an absolute host path.
    pub fn file(path: &std::path::Path) -> ContentRef {
        ContentRef {
            source: Some(file_url(path)),
            ..Default::default()
        }
    }

    /// The reference `spin registry push` writes for a layer's bytes: the digest, and the
    /// bytes inline when they are at most [`INLINE_MAX`] long.
    pub fn for_layer(data: &[u8]) -> ContentRef {
        ContentRef {
            source: None,
            inline: (data.len() <= INLINE_MAX).then(|| data.to_vec()),
            digest: Some(sha256_digest(data)),
        }
    }

    /// The host path of a `file://` source.
    pub fn file_path(&self) -> Option<std::path::PathBuf> {
        self.source
            .as_deref()
            .and_then(|s| s.strip_prefix("file://"))
            .map(|p| std::path::PathBuf::from(percent_decode(p)))
    }
}

/// `sha256:<hex>` of `data`.
pub fn sha256_digest(data: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(data)))
}

/// A `file://` URL for an absolute path (characters URLs reserve are percent-encoded).
pub fn file_url(path: &std::path::Path) -> String {
    let mut out = String::from("file://");
    for b in path.to_string_lossy().bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A trigger: `{"id", "trigger_type", "trigger_config"}` (see [`crate::trigger`] for the
/// typed view of `trigger_config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockedTrigger {
    /// Application-unique id.
    pub id: String,
    /// Trigger type (`http`, `redis`, ...).
    pub trigger_type: String,
    /// Trigger-type-specific configuration.
    pub trigger_config: Value,
    /// Trigger dependencies (e.g. middleware).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub trigger_dependencies: BTreeMap<String, Vec<LockedComponentDependency>>,
}

/// An application variable.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Variable {
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Default value; none means the variable is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Whether the value is sensitive (never logged).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
}

mod base64_opt {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine as _;
    use serde::{de, Deserialize, Deserializer, Serializer};

    /// Spin writes without padding; padded input is accepted too.
    const DECODE: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => s.serialize_str(&super::BASE64.encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<std::borrow::Cow<str>>::deserialize(d)? {
            Some(s) => DECODE
                .decode(s.as_bytes())
                .map(Some)
                .map_err(|e| de::Error::custom(format!("`inline` is not valid base64: {e}"))),
            None => Ok(None),
        }
    }
}

const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD_NO_PAD;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_path_is_flat_and_inline_unpadded() {
        let f = ContentPath {
            content: ContentRef::for_layer(b"tiny"),
            path: "static/a.txt".into(),
        };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(
            v,
            json!({"inline": "dGlueQ", "digest": sha256_digest(b"tiny"), "path": "static/a.txt"})
        );
        let back: ContentPath =
            serde_json::from_value(json!({"inline": "dGlueQ==", "path": "x"})).unwrap();
        assert_eq!(back.content.inline.as_deref(), Some(&b"tiny"[..]));
    }

    #[test]
    fn version_follows_host_requirements() {
        let mut app = LockedApp::default();
        assert!(String::from_utf8(app.to_json())
            .unwrap()
            .starts_with(r#"{"spin_lock_version":0,"triggers":[]"#));
        app.host_requirements
            .insert(SERVICE_CHAINING_KEY.into(), "required".into());
        app.must_understand
            .push(MUST_UNDERSTAND_HOST_REQUIREMENTS.into());
        let back = LockedApp::from_json(&app.to_json()).unwrap();
        assert_eq!(back.spin_lock_version, 1);
        assert_eq!(back.unmet_host_requirements(&[]), [SERVICE_CHAINING_KEY]);
        assert!(back
            .unmet_host_requirements(&[SERVICE_CHAINING_KEY])
            .is_empty());
    }

    #[test]
    fn unknown_fields_ignored_unknown_must_understand_refused() {
        let ok = json!({"spin_lock_version": 1, "triggers": [], "components": [], "future": 1});
        LockedApp::from_json(ok.to_string().as_bytes()).unwrap();
        let bad = json!({"spin_lock_version": 1, "must_understand": ["teleport"], "triggers": [], "components": []});
        let e = LockedApp::from_json(bad.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("teleport"), "{e}");
        let opt = json!({"spin_lock_version": 1, "host_requirements": {"x": "optional"}, "triggers": [], "components": []});
        assert!(LockedApp::from_json(opt.to_string().as_bytes())
            .unwrap()
            .host_requirements
            .is_empty());
    }

    #[test]
    fn component_ids_are_checked_at_parse() {
        let lock = json!({"spin_lock_version": 0, "triggers": [], "components": [{
            "id": "x/../../data",
            "source": {"content_type": "application/wasm", "digest": "sha256:aa"}}]});
        let e = LockedApp::from_json(lock.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("components[0].id")
                && e.contains("`x/../../data`")
                && e.contains("kebab-case"),
            "{e}"
        );
    }

    #[test]
    fn trigger_ids_and_file_paths_are_checked_at_parse() {
        check_guest_path("/static/a.txt").unwrap();
        check_guest_path("/").unwrap();
        assert!(check_guest_path("/a/../../etc").is_err());
        assert!(check_guest_path(&"a/".repeat(200)).is_err());
        let lock = |trigger: &str, path: &str| {
            json!({"spin_lock_version": 0,
                "triggers": [{"id": trigger, "trigger_type": "http", "trigger_config": {}}],
                "components": [{"id": "c",
                    "source": {"content_type": "application/wasm", "digest": "sha256:aa"},
                    "files": [{"inline": "eA", "path": path}]}]})
            .to_string()
        };
        let e = LockedApp::from_json(lock("t\nx", "/a").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("triggers[0].id") && e.contains("t\\nx"), "{e}");
        let e = LockedApp::from_json(lock("t", "../up").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("files[0].path") && e.contains("`..`"), "{e}");
        // Over the document cap: refused unread.
        let big = vec![b' '; MAX_DOCUMENT_BYTES as usize + 1];
        let e = LockedApp::from_json(&big).unwrap_err().to_string();
        assert!(e.contains("more than the limit of 4194304"), "{e}");
    }

    #[test]
    fn file_urls_round_trip() {
        let p = std::path::Path::new("/a b/c%d.wasm");
        let r = ContentRef::file(p);
        assert_eq!(r.source.as_deref(), Some("file:///a%20b/c%25d.wasm"));
        assert_eq!(r.file_path().unwrap(), p);
    }
}
