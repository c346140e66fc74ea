//! The runtime config (Spin's `runtime-config.toml`), read once per app.
//!
//! [`Source`] hands each host feature ([`super::HostFeature::parse`]) the top-level keys it
//! owns and remembers which were taken. A key no feature takes is an error, as in Spin
//! (`spin-factors`' `TomlKeyTracker::validate_all_keys_used`: "unused runtime config
//! key(s): ..."). Inside a section, each feature reports unknown keys as Spin's does: an
//! error where Spin's section is `deny_unknown_fields` (`[outbound_*]`, `[[client_tls]]`,
//! `[sqlite_database.*]`, variables providers), a warning where Spin ignores them
//! (`[key_value_store.*]`, `[llm_compute]`).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context as _;

/// Top-level keys Spin reads outside its host features (`spin-runtime-config`'s
/// `TomlResolver`): accepted, and logged as not applied here.
pub const SPIN_RUNTIME_KEYS: &[&str] = &["state_dir", "log_dir", "max_instance_memory"];

/// A parsed runtime config document and the keys no feature has taken yet.
pub struct Source<'a> {
    table: &'a toml::Table,
    unused: RefCell<BTreeSet<&'a str>>,
    base_dir: &'a Path,
    origin: &'a str,
}

impl<'a> Source<'a> {
    /// The document `table`, read from `origin` (named in errors); relative paths in it
    /// resolve against `base_dir`.
    pub fn new(table: &'a toml::Table, base_dir: &'a Path, origin: &'a str) -> Self {
        Source {
            table,
            unused: RefCell::new(table.keys().map(String::as_str).collect()),
            base_dir,
            origin,
        }
    }

    /// The top-level key `key`, if present; it counts as used from now on.
    pub fn take(&self, key: &str) -> Option<&'a toml::Value> {
        self.unused.borrow_mut().remove(key);
        self.table.get(key)
    }

    /// Every top-level key of the document, in its order (taken or not).
    pub fn keys(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.table.keys().map(String::as_str)
    }

    /// The directory relative paths resolve against (the file's own).
    pub fn base_dir(&self) -> &'a Path {
        self.base_dir
    }

    /// Where the document came from, for messages.
    pub fn origin(&self) -> &'a str {
        self.origin
    }

    /// Fails naming every top-level key that no feature took (Spin's "unused runtime config
    /// key(s)"), with the keys this runtime reads; logs Spin's runtime keys it does not apply.
    pub fn finish(self, sections: &[&str]) -> anyhow::Result<()> {
        let unused = self.unused.into_inner();
        let (spin_only, unknown): (Vec<&str>, Vec<&str>) = unused
            .into_iter()
            .partition(|k| SPIN_RUNTIME_KEYS.contains(k));
        for key in spin_only {
            tracing::warn!(
                "{}: `{key}` is read by Spin's CLI but not applied by this runtime (the state \
                 directory is <app dir>/.spin or SPIN_STATE_DIR; logs go to the container's \
                 output; SPIN_MAX_INSTANCE_MEMORY caps instance memory); it is ignored",
                self.origin
            );
        }
        if unknown.is_empty() {
            return Ok(());
        }
        let shown: Vec<String> = unknown
            .iter()
            .map(|k| spin_app_format::untrusted::shown(k).to_string())
            .collect();
        anyhow::bail!(
            "{}: unused runtime config key(s): {}: no host feature reads them (as in Spin, an \
             unknown section is an error); the runtime config takes {}; remove or rename them",
            self.origin,
            shown.join(", "),
            sections
                .iter()
                .chain(SPIN_RUNTIME_KEYS)
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Parses runtime config text into a TOML table; `origin` names the source in errors.
pub fn parse_document(text: &str, origin: &str) -> anyhow::Result<toml::Table> {
    toml::from_str(text).map_err(|e| {
        let e = spin_app_format::untrusted::toml_error(&e, text);
        anyhow::anyhow!("{origin}: invalid TOML: {e}")
    })
}

/// Reads a runtime config file (a regular file of at most 4 MiB) as text.
pub fn read_file(path: &Path) -> anyhow::Result<String> {
    use spin_app_format::untrusted::{read_regular, MAX_DOCUMENT_BYTES};
    String::from_utf8(read_regular(path, MAX_DOCUMENT_BYTES, "runtime config")?)
        .with_context(|| format!("runtime config {} is not UTF-8 text", path.display()))
}

/// Logs each key of `table` (the section or entry `key`) that is not in `known`: for the
/// sections whose unknown keys Spin ignores without a word.
pub fn warn_unknown_keys(table: &toml::Table, known: &[&str], key: &str, origin: &str) {
    for field in table.keys().filter(|k| !known.contains(&k.as_str())) {
        tracing::warn!(
            "{origin}: `{key}.{}` is not a key of this section and is ignored (as Spin \
             ignores it); it takes {}",
            spin_app_format::untrusted::shown(field),
            known
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}
