//! Spin app images: the spin-in-container form and the Spin OCI artifact form (as
//! `spin registry push` lays it out), with the locked-app JSON generated from `spin.toml`.

use crate::rootfs::{normalize, TarTree};
use crate::{rootfs_image, Blob, Image, Platform, ProcessConfig, MEDIA_TYPE_CONFIG};
use anyhow::{bail, ensure, Context, Result};
use base64::Engine;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Media type of the locked-app JSON layer.
pub const MEDIA_TYPE_LOCKED_APP: &str = "application/vnd.fermyon.spin.application.v1+config";
/// Media type of a component layer.
pub const MEDIA_TYPE_WASM_LAYER: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// Media type of a single static file layer.
pub const MEDIA_TYPE_DATA_LAYER: &str = "application/vnd.wasm.content.layer.v1+data";
/// Media type of a gzip tar archive of a component's files.
pub const MEDIA_TYPE_ARCHIVE_LAYER: &str = "application/vnd.wasm.content.bundle.v1.tar+gzip";
/// Media type of the single-layer Wasm component form (wkg).
pub const MEDIA_TYPE_WASM: &str = "application/wasm";
/// Config media type of the single-layer Wasm component form.
pub const MEDIA_TYPE_WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// Image config label holding the digest of the locked-app layer.
pub const LABEL_LOCKED_APP_DIGEST: &str = "com.fermyon.spin.lockedAppDigest";
/// Files up to this size are inlined in the locked app (base64 without padding).
pub const INLINE_MAX: usize = 128;

/// One static file of a component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// The file on the host.
    pub host: PathBuf,
    /// Its path relative to the app directory (where `spin.toml` names it).
    pub source_rel: String,
    /// Its path inside the component (relative, no leading `/`).
    pub dest: String,
}

/// A component of a loaded app.
#[derive(Debug, Clone)]
pub struct Component {
    /// Component id.
    pub id: String,
    /// The Wasm file on the host.
    pub source: PathBuf,
    /// Static files.
    pub files: Vec<FileEntry>,
    /// `environment`.
    pub env: BTreeMap<String, String>,
    /// `allowed_outbound_hosts` (or converted `allowed_http_hosts`).
    pub allowed_outbound_hosts: Vec<String>,
    /// `key_value_stores`.
    pub key_value_stores: Vec<String>,
    /// `sqlite_databases`.
    pub databases: Vec<String>,
    /// `variables` (templates kept as written).
    pub config: BTreeMap<String, String>,
}

/// A Spin app directory with its parsed `spin.toml` (manifest version 2).
#[derive(Debug, Clone)]
pub struct SpinApp {
    /// The app directory.
    pub dir: PathBuf,
    /// The manifest as parsed.
    pub manifest: toml::Table,
    /// Components in manifest order.
    pub components: Vec<Component>,
}

fn str_list(v: Option<&toml::Value>, what: &str) -> Result<Vec<String>> {
    let Some(v) = v else { return Ok(vec![]) };
    v.as_array()
        .with_context(|| format!("{what} must be a list of strings"))?
        .iter()
        .map(|s| {
            s.as_str()
                .map(str::to_string)
                .with_context(|| format!("{what} must be a list of strings, found {s}"))
        })
        .collect()
}

fn str_map(v: Option<&toml::Value>, what: &str) -> Result<BTreeMap<String, String>> {
    let Some(v) = v else {
        return Ok(BTreeMap::new());
    };
    v.as_table()
        .with_context(|| format!("{what} must be a table of strings"))?
        .iter()
        .map(|(k, s)| {
            Ok((
                k.clone(),
                s.as_str()
                    .with_context(|| format!("{what}.{k} must be a string"))?
                    .to_string(),
            ))
        })
        .collect()
}

fn rel_to(dir: &Path, p: &Path) -> Result<String> {
    let rel = p
        .strip_prefix(dir)
        .with_context(|| format!("{} is not inside {}", p.display(), dir.display()))?;
    normalize(&rel.to_string_lossy())
}

fn walk_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read directory {}", dir.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        if path.is_dir() {
            walk_files(&path, out)?;
        } else if path.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

fn component_files(dir: &Path, id: &str, c: &toml::Table) -> Result<Vec<FileEntry>> {
    let excludes = str_list(
        c.get("exclude_files"),
        &format!("component.{id}.exclude_files"),
    )?
    .iter()
    .map(|p| glob::Pattern::new(p).with_context(|| format!("bad exclude_files glob {p:?}")))
    .collect::<Result<Vec<_>>>()?;
    let excluded = |rel: &str| excludes.iter().any(|p| p.matches(rel));
    let mut files = Vec::new();
    let Some(list) = c.get("files") else {
        return Ok(files);
    };
    let list = list
        .as_array()
        .with_context(|| format!("component.{id}.files must be a list"))?;
    for f in list {
        if let Some(pattern) = f.as_str() {
            let full = dir.join(pattern);
            let mut matched = Vec::new();
            for m in glob::glob(&full.to_string_lossy())
                .with_context(|| format!("bad files glob {pattern:?} in component {id}"))?
            {
                let m = m?;
                if m.is_file() {
                    matched.push(m);
                }
            }
            matched.sort();
            for m in matched {
                let rel = rel_to(dir, &m)?;
                if !excluded(&rel) {
                    files.push(FileEntry {
                        host: m,
                        source_rel: rel.clone(),
                        dest: rel,
                    });
                }
            }
        } else if let Some(t) = f.as_table() {
            let (Some(src), Some(dst)) = (
                t.get("source").and_then(|v| v.as_str()),
                t.get("destination").and_then(|v| v.as_str()),
            ) else {
                bail!("component.{id}.files entry {f} needs string `source` and `destination`");
            };
            ensure!(
                dst.starts_with('/'),
                "component.{id}.files destination {dst:?} must be absolute (start with /)"
            );
            let src_path = dir.join(src);
            let dst = normalize(dst)?;
            let join = |a: &str, b: &str| {
                if a.is_empty() {
                    b.to_string()
                } else {
                    format!("{a}/{b}")
                }
            };
            if src_path.is_dir() {
                let mut found = Vec::new();
                walk_files(&src_path, &mut found)?;
                for m in found {
                    let inner = rel_to(&src_path, &m)?;
                    files.push(FileEntry {
                        source_rel: rel_to(dir, &m)?,
                        dest: join(&dst, &inner),
                        host: m,
                    });
                }
            } else if src_path.is_file() {
                files.push(FileEntry {
                    source_rel: rel_to(dir, &src_path)?,
                    dest: dst,
                    host: src_path,
                });
            } else {
                bail!(
                    "component.{id}.files source {} does not exist",
                    src_path.display()
                );
            }
        } else {
            bail!("component.{id}.files entries must be globs or {{ source, destination }} tables, found {f}");
        }
    }
    Ok(files)
}

impl SpinApp {
    /// Loads `<dir>/spin.toml`, resolving component sources and files.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("spin.toml");
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!("cannot read {}: pass a Spin app directory", path.display())
        })?;
        let manifest: toml::Table = toml::from_str(&text)
            .with_context(|| format!("{} is not valid TOML", path.display()))?;
        let version = manifest
            .get("spin_manifest_version")
            .and_then(|v| v.as_integer());
        ensure!(
            version == Some(2),
            "{}: spin_manifest_version must be 2 (found {version:?}); run `spin doctor` to upgrade",
            path.display()
        );
        let mut components = Vec::new();
        if let Some(table) = manifest.get("component").and_then(|c| c.as_table()) {
            for (id, c) in table {
                let c = c
                    .as_table()
                    .with_context(|| format!("component.{id} must be a table"))?;
                let source = match c.get("source") {
                    Some(toml::Value::String(s)) => dir.join(s),
                    Some(_) => bail!(
                        "component.{id}.source must be a local path; download url sources first and point `source` at the file"
                    ),
                    None => bail!("component.{id} has no source"),
                };
                ensure!(
                    source.is_file(),
                    "component.{id}.source {} does not exist: build the app first",
                    source.display()
                );
                let mut hosts = str_list(
                    c.get("allowed_outbound_hosts"),
                    &format!("component.{id}.allowed_outbound_hosts"),
                )?;
                for h in str_list(
                    c.get("allowed_http_hosts"),
                    &format!("component.{id}.allowed_http_hosts"),
                )? {
                    hosts.push(match h.as_str() {
                        "insecure:allow-all" => "*://*:*".to_string(),
                        h if h.contains("://") => h.to_string(),
                        h => format!("https://{h}"),
                    });
                }
                components.push(Component {
                    id: id.clone(),
                    files: component_files(dir, id, c)?,
                    source,
                    env: str_map(c.get("environment"), &format!("component.{id}.environment"))?,
                    allowed_outbound_hosts: hosts,
                    key_value_stores: str_list(
                        c.get("key_value_stores"),
                        &format!("component.{id}.key_value_stores"),
                    )?,
                    databases: str_list(
                        c.get("sqlite_databases"),
                        &format!("component.{id}.sqlite_databases"),
                    )?,
                    config: str_map(c.get("variables"), &format!("component.{id}.variables"))?,
                });
            }
        }
        ensure!(
            !components.is_empty(),
            "{} declares no components",
            path.display()
        );
        Ok(Self {
            dir: dir.to_path_buf(),
            manifest,
            components,
        })
    }

    /// The locked-app JSON, with each component's Wasm and files described by `source`
    /// and `files` (content references chosen by the caller).
    fn locked_app(
        &self,
        source: impl Fn(&Component) -> Result<Value>,
        files: impl Fn(&Component) -> Result<Vec<Value>>,
    ) -> Result<Value> {
        let app = self
            .manifest
            .get("application")
            .and_then(|a| a.as_table())
            .context("spin.toml has no [application] table")?;
        let mut metadata = Map::new();
        metadata.insert(
            "name".into(),
            json!(app
                .get("name")
                .and_then(|v| v.as_str())
                .context("[application] has no name")?),
        );
        metadata.insert(
            "version".into(),
            json!(app.get("version").and_then(|v| v.as_str()).unwrap_or("")),
        );
        if let Some(d) = app.get("description").and_then(|v| v.as_str()) {
            metadata.insert("description".into(), json!(d));
        }
        let authors = str_list(app.get("authors"), "application.authors")?;
        if !authors.is_empty() {
            metadata.insert("authors".into(), json!(authors));
        }
        let http_global = app
            .get("trigger")
            .and_then(|t| t.get("http"))
            .map(serde_json::to_value)
            .transpose()?
            .unwrap_or_else(|| json!({}));
        metadata.insert("trigger".into(), json!({ "type": "http" }));
        metadata.insert("triggers".into(), json!({ "http": http_global }));

        let mut variables = Map::new();
        if let Some(vars) = self.manifest.get("variables").and_then(|v| v.as_table()) {
            for (name, v) in vars {
                let default = v.get("default").and_then(|d| d.as_str());
                let required = v.get("required").and_then(|d| d.as_bool()).unwrap_or(false);
                ensure!(
                    default.is_some() != required,
                    "variable {name:?} must have either a default or `required = true`, not both or neither"
                );
                let secret = v.get("secret").and_then(|d| d.as_bool()).unwrap_or(false);
                let mut lv = json!({ "secret": secret });
                if let Some(d) = default {
                    lv["default"] = json!(d);
                }
                variables.insert(name.clone(), lv);
            }
        }

        let mut triggers = Vec::new();
        let mut used_ids = std::collections::HashSet::new();
        let empty = vec![];
        let http = self
            .manifest
            .get("trigger")
            .and_then(|t| t.get("http"))
            .map(|h| {
                h.as_array()
                    .context("[[trigger.http]] must be an array of tables")
            })
            .transpose()?
            .unwrap_or(&empty);
        for t in http {
            let route = t.get("route").context("a [[trigger.http]] has no route")?;
            let mut cfg = json!({ "route": serde_json::to_value(route)? });
            let base_id = if let Some(comp) = t.get("component") {
                let comp = comp.as_str().context(
                    "[[trigger.http]] component must name a [component.<id>]; inline components are not supported",
                )?;
                ensure!(
                    self.components.iter().any(|c| c.id == comp),
                    "[[trigger.http]] names component {comp:?}, which spin.toml does not declare"
                );
                cfg["component"] = json!(comp);
                comp.to_string()
            } else if let Some(sr) = t.get("static_response") {
                cfg["static_response"] = serde_json::to_value(sr)?;
                "static".to_string()
            } else {
                bail!("a [[trigger.http]] needs `component` or `static_response`");
            };
            if let Some(e) = t.get("executor") {
                cfg["executor"] = serde_json::to_value(e)?;
            }
            let mut id = format!("{base_id}-http-trigger");
            let mut n = 1;
            while !used_ids.insert(id.clone()) {
                id = format!("{base_id}-http-trigger{n}");
                n += 1;
            }
            triggers.push(json!({ "id": id, "trigger_type": "http", "trigger_config": cfg }));
        }

        let mut components = Vec::new();
        for c in &self.components {
            components.push(json!({
                "id": c.id,
                "metadata": {
                    "allowed_outbound_hosts": c.allowed_outbound_hosts,
                    "key_value_stores": c.key_value_stores,
                    "databases": c.databases,
                },
                "source": source(c)?,
                "env": c.env,
                "files": files(c)?,
                "config": c.config,
            }));
        }
        Ok(json!({
            "spin_lock_version": 0,
            "metadata": metadata,
            "variables": variables,
            "triggers": triggers,
            "components": components,
        }))
    }
}

/// A content reference as Spin writes it: the digest, plus the bytes inlined (standard
/// base64 without padding) when they are at most [`INLINE_MAX`] bytes.
pub fn content_ref(data: &[u8]) -> Value {
    let mut r = json!({ "digest": crate::sha256_digest(data) });
    if data.len() <= INLINE_MAX {
        r["inline"] = json!(base64::engine::general_purpose::STANDARD_NO_PAD.encode(data));
    }
    r
}

/// How a Spin artifact carries static files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileLayout {
    /// One data layer per file (files <= 128 bytes only inlined), as `spin registry push`.
    Simple,
    /// One tar+gzip archive layer per component (`SPIN_OCI_ARCHIVE_LAYERS=1`).
    Archive,
}

/// A Spin OCI artifact of the app in `app_dir`.
pub fn artifact_image(name: &str, app_dir: &Path, layout: FileLayout) -> Result<Image> {
    let app = SpinApp::load(app_dir)?;
    let mut layers: Vec<Blob> = Vec::new();
    let mut push = |b: Blob| {
        if !layers
            .iter()
            .any(|l| l.data == b.data && l.media_type == b.media_type)
        {
            layers.push(b);
        }
    };
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("cannot read {}", p.display()));
    for c in &app.components {
        push(Blob::new(MEDIA_TYPE_WASM_LAYER, read(&c.source)?));
        match layout {
            FileLayout::Simple => {
                for f in &c.files {
                    let data = read(&f.host)?;
                    if data.len() > INLINE_MAX {
                        push(Blob::new(MEDIA_TYPE_DATA_LAYER, data));
                    }
                }
            }
            FileLayout::Archive if !c.files.is_empty() => {
                let mut t = TarTree::new();
                for f in &c.files {
                    t.add_host_file(&f.host, &f.dest)?;
                }
                push(Blob::new(MEDIA_TYPE_ARCHIVE_LAYER, t.to_tar_gz()?));
            }
            FileLayout::Archive => {}
        }
    }
    let locked = app.locked_app(
        |c| {
            let mut s = content_ref(&read(&c.source)?);
            s["content_type"] = json!("application/wasm");
            Ok(s)
        },
        |c| {
            c.files
                .iter()
                .map(|f| Ok(json!({ "content": content_ref(&read(&f.host)?), "path": f.dest })))
                .collect()
        },
    )?;
    let locked_layer = Blob::new(MEDIA_TYPE_LOCKED_APP, serde_json::to_vec(&locked)?);
    let locked_digest = locked_layer.digest();
    layers.push(locked_layer);
    let platform = Platform::wasm_wasip1();
    let config = json!({
        "architecture": platform.architecture,
        "os": platform.os,
        "config": { "Labels": { LABEL_LOCKED_APP_DIGEST: locked_digest } },
        "rootfs": { "type": "layers", "diff_ids": [] },
    });
    let mut annotations = BTreeMap::new();
    if let Some(n) = locked["metadata"]["name"].as_str() {
        annotations.insert("org.opencontainers.image.title".into(), n.to_string());
    }
    if let Some(v) = locked["metadata"]["version"]
        .as_str()
        .filter(|v| !v.is_empty())
    {
        annotations.insert("org.opencontainers.image.version".into(), v.to_string());
    }
    Ok(Image {
        name: name.into(),
        platform,
        config: Blob::new(MEDIA_TYPE_CONFIG, serde_json::to_vec(&config)?),
        layers,
        manifest_media_type_field: false,
        manifest_annotations: annotations,
    })
}

/// The single-layer form: one `application/wasm` component layer (served at `/...` by
/// the Spin executor), config `application/vnd.wasm.config.v0+json`, platform wasip2/wasm.
pub fn wasm_component_image(name: &str, wasm: &Path) -> Result<Image> {
    let data = std::fs::read(wasm).with_context(|| format!("cannot read {}", wasm.display()))?;
    ensure!(
        data.starts_with(b"\0asm"),
        "{} is not a WebAssembly binary",
        wasm.display()
    );
    let layer = Blob::new(MEDIA_TYPE_WASM, data);
    let platform = Platform {
        architecture: "wasm".into(),
        os: "wasip2".into(),
    };
    let config = json!({
        "architecture": platform.architecture,
        "os": platform.os,
        "layerDigests": [layer.digest()],
    });
    Ok(Image {
        name: name.into(),
        platform,
        config: Blob::new(MEDIA_TYPE_WASM_CONFIG, serde_json::to_vec(&config)?),
        layers: vec![layer],
        manifest_media_type_field: true,
        manifest_annotations: BTreeMap::new(),
    })
}

/// A spin-in-container image: rootfs with `/spin.toml` (component sources rewritten to
/// `components/<name>-<digest12>.wasm` inside the rootfs), the component files at their
/// manifest-relative paths, `/runtime-config.toml` if the app has one; command `/`.
pub fn container_image(name: &str, app_dir: &Path, env: &[String]) -> Result<Image> {
    let app = SpinApp::load(app_dir)?;
    let mut manifest = app.manifest.clone();
    let mut tree = TarTree::new();
    for c in &app.components {
        let data = std::fs::read(&c.source)?;
        let stem = c
            .source
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("component");
        let rel = format!(
            "components/{stem}-{}.wasm",
            &crate::sha256_digest(&data)[7..19]
        );
        if !tree.contains(&rel) {
            tree.add_file(&rel, data, 0o644)?;
        }
        manifest["component"][&c.id]["source"] = toml::Value::String(rel);
        for f in &c.files {
            if !tree.contains(&f.source_rel) {
                tree.add_host_file(&f.host, &f.source_rel)?;
            }
        }
    }
    tree.add_file("spin.toml", toml::to_string(&manifest)?.into_bytes(), 0o644)?;
    let rc = app_dir.join("runtime-config.toml");
    if rc.is_file() {
        tree.add_host_file(&rc, "runtime-config.toml")?;
    }
    rootfs_image(
        name,
        tree,
        &ProcessConfig {
            cmd: vec!["/".into()],
            env: env.to_vec(),
            ..Default::default()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read_archive;

    fn app(dir: &Path) {
        std::fs::create_dir_all(dir.join("static/sub")).unwrap();
        std::fs::create_dir_all(dir.join("assets")).unwrap();
        std::fs::write(dir.join("app.wasm"), b"\0asm\x01\0\0\0component-bytes").unwrap();
        std::fs::write(dir.join("static/small.txt"), b"tiny").unwrap();
        std::fs::write(dir.join("static/sub/big.txt"), vec![b'x'; 300]).unwrap();
        std::fs::write(dir.join("static/secret.txt"), b"no").unwrap();
        std::fs::write(dir.join("assets/a.txt"), vec![b'a'; 200]).unwrap();
        std::fs::write(
            dir.join("spin.toml"),
            r#"
spin_manifest_version = 2
[application]
name = "t"
version = "1.0.0"
[variables]
greeting = { default = "hi" }
token = { required = true, secret = true }
[[trigger.http]]
route = "/..."
component = "web"
[[trigger.http]]
route = { private = true }
component = "web"
[component.web]
source = "app.wasm"
files = ["static/**/*", { source = "assets", destination = "/data" }]
exclude_files = ["static/secret.txt"]
environment = { A = "1" }
allowed_outbound_hosts = ["https://example.com"]
key_value_stores = ["default"]
variables = { msg = "{{ greeting }}" }
"#,
        )
        .unwrap();
    }

    #[test]
    fn artifact_layout_matches_spin_registry_push() {
        let d = tempfile::tempdir().unwrap();
        app(d.path());
        let img = artifact_image("docker.io/library/t:1", d.path(), FileLayout::Simple).unwrap();
        let c = read_archive(&img.archive_bytes().unwrap().0).unwrap();
        assert!(c.manifest.get("mediaType").is_none());
        assert_eq!(c.config["architecture"], "wasm");
        assert_eq!(c.config["os"], "wasip1");
        let types: Vec<&str> = c.layers.iter().map(|l| l.0.as_str()).collect();
        // wasm, data layers of the two big files (small one inlined), locked app last
        assert_eq!(
            types,
            [
                MEDIA_TYPE_WASM_LAYER,
                MEDIA_TYPE_DATA_LAYER,
                MEDIA_TYPE_DATA_LAYER,
                MEDIA_TYPE_LOCKED_APP
            ]
        );
        let (_, locked_bytes) = c.layers.last().unwrap();
        assert_eq!(
            c.config["config"]["Labels"][LABEL_LOCKED_APP_DIGEST],
            crate::sha256_digest(locked_bytes)
        );
        let locked: Value = serde_json::from_slice(locked_bytes).unwrap();
        assert_eq!(locked["spin_lock_version"], 0);
        assert_eq!(locked["triggers"][0]["id"], "web-http-trigger");
        assert_eq!(
            locked["triggers"][1]["trigger_config"]["route"],
            json!({"private": true})
        );
        assert_ne!(locked["triggers"][0]["id"], locked["triggers"][1]["id"]);
        assert_eq!(locked["variables"]["token"], json!({"secret": true}));
        assert_eq!(locked["variables"]["greeting"]["default"], "hi");
        let comp = &locked["components"][0];
        assert_eq!(comp["config"]["msg"], "{{ greeting }}");
        assert_eq!(comp["source"]["content_type"], "application/wasm");
        assert_eq!(
            comp["source"]["digest"],
            crate::sha256_digest(&c.layers[0].1)
        );
        let files = comp["files"].as_array().unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
        assert_eq!(
            paths,
            ["static/small.txt", "static/sub/big.txt", "data/a.txt"]
        );
        assert_eq!(files[0]["content"]["inline"], "dGlueQ"); // "tiny", no padding
        assert!(files[1]["content"].get("inline").is_none());
        assert_eq!(
            files[1]["content"]["digest"],
            crate::sha256_digest(&c.layers[1].1)
        );
    }

    #[test]
    fn archive_layout_has_one_archive_per_component() {
        let d = tempfile::tempdir().unwrap();
        app(d.path());
        let img = artifact_image("docker.io/library/t:1", d.path(), FileLayout::Archive).unwrap();
        let c = read_archive(&img.archive_bytes().unwrap().0).unwrap();
        assert_eq!(c.layers[1].0, MEDIA_TYPE_ARCHIVE_LAYER);
        assert_eq!(c.layers.len(), 3);
        let mut gz = flate2::read::GzDecoder::new(c.layers[1].1.as_slice());
        let mut tar = Vec::new();
        std::io::Read::read_to_end(&mut gz, &mut tar).unwrap();
        let t = TarTree::from_tar(&tar).unwrap();
        assert!(t.contains("data/a.txt") && t.contains("static/sub/big.txt"));
        assert!(!t.contains("static/secret.txt"));
    }

    #[test]
    fn container_form_rewrites_sources() {
        let d = tempfile::tempdir().unwrap();
        app(d.path());
        let img = container_image("docker.io/library/t:c", d.path(), &[]).unwrap();
        let c = read_archive(&img.archive_bytes().unwrap().0).unwrap();
        assert_eq!(c.config["config"]["Cmd"], json!(["/"]));
        let t = TarTree::from_tar(&c.layers[0].1).unwrap();
        let Some(crate::rootfs::Node::File { data, .. }) = t.nodes().get("spin.toml") else {
            panic!("no spin.toml")
        };
        let m: toml::Table = toml::from_str(std::str::from_utf8(data).unwrap()).unwrap();
        let src = m["component"]["web"]["source"].as_str().unwrap();
        assert!(
            src.starts_with("components/app-") && t.contains(src),
            "{src}"
        );
        assert!(t.contains("assets/a.txt") && t.contains("static/small.txt"));
    }

    #[test]
    fn manifest_errors_name_the_problem() {
        let d = tempfile::tempdir().unwrap();
        app(d.path());
        let p = d.path().join("spin.toml");
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(
            &p,
            text.replace("source = \"app.wasm\"", "source = \"missing.wasm\""),
        )
        .unwrap();
        let err = SpinApp::load(d.path()).unwrap_err().to_string();
        assert!(
            err.contains("component.web.source") && err.contains("missing.wasm"),
            "{err}"
        );
        std::fs::write(&p, "spin_manifest_version = 1").unwrap();
        assert!(SpinApp::load(d.path())
            .unwrap_err()
            .to_string()
            .contains("spin_manifest_version"));
    }
}
