//! Parsing of `linux.cgroupsPath`, systemd slice expansion and the `SystemdCgroup` option.

use std::path::{Component, Path, PathBuf};

use crate::PlacementError;

/// Longest name of one cgroup directory (the kernel's NAME_MAX).
pub const MAX_COMPONENT_LEN: usize = 255;

/// The slice used when a systemd-form path leaves the slice empty (as runc does).
pub const DEFAULT_SLICE: &str = "system.slice";

/// A parsed `linux.cgroupsPath`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupsPath {
    /// The runc/systemd form `slice:prefix:name`. `slice` is never empty (an empty slice
    /// became [`DEFAULT_SLICE`]).
    Systemd {
        /// Parent slice unit, e.g. `kubepods-burstable-pod<uid_>.slice`.
        slice: String,
        /// Unit name prefix, e.g. `cri-containerd`.
        prefix: String,
        /// Unit name, usually the container id.
        name: String,
    },
    /// An absolute cgroupfs path, normalised (no `.`, no empty components).
    Absolute(PathBuf),
    /// A relative cgroupfs path, normalised; it is placed below each hierarchy's root.
    Relative(PathBuf),
}

impl CgroupsPath {
    /// The systemd unit this form names: `<prefix>-<name>.scope`, or `name` itself when it
    /// is a slice. `None` for cgroupfs forms.
    pub fn unit_name(&self) -> Option<String> {
        match self {
            CgroupsPath::Systemd { prefix, name, .. } => Some(unit_name(prefix, name)),
            _ => None,
        }
    }

    /// The cgroup path relative to a hierarchy root, always starting with `/`: for the
    /// systemd form the path systemd would use (`/<expanded slice>/<unit>`).
    pub fn relative_path(&self) -> PathBuf {
        match self {
            // As runc and youki: `<expanded slice>/<unit>`, also when the unit is a slice.
            CgroupsPath::Systemd {
                slice,
                prefix,
                name,
            } => expand_slice(slice)
                .expect("validated while parsing")
                .join(unit_name(prefix, name)),
            CgroupsPath::Absolute(p) => p.clone(),
            CgroupsPath::Relative(p) => Path::new("/").join(p),
        }
    }
}

fn unit_name(prefix: &str, name: &str) -> String {
    if name.ends_with(".slice") {
        name.to_string()
    } else {
        format!("{prefix}-{name}.scope")
    }
}

/// Parses a `linux.cgroupsPath` value.
///
/// A value containing `:` must be the systemd form `slice:prefix:name`; a value starting
/// with `/` is an absolute cgroupfs path; anything else is a relative cgroupfs path.
/// Validates as runc does and rejects anything that could escape the hierarchy.
pub fn parse_cgroups_path(value: &str) -> Result<CgroupsPath, PlacementError> {
    if value.contains(':') {
        return parse_systemd(value);
    }
    let invalid = |reason: String| PlacementError::InvalidPath {
        value: value.to_string(),
        reason,
    };
    if value.is_empty() {
        return Err(invalid("the path is empty".into()));
    }
    if value.contains('\0') {
        return Err(invalid("it contains a NUL byte".into()));
    }
    let mut normalised = PathBuf::new();
    for component in Path::new(value).components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                return Err(invalid("\"..\" would leave the cgroup hierarchy".into()))
            }
            Component::Normal(c) => {
                if c.len() > MAX_COMPONENT_LEN {
                    return Err(invalid(format!(
                        "component {:?} is {} bytes long (limit {MAX_COMPONENT_LEN})",
                        c,
                        c.len()
                    )));
                }
                normalised.push(c);
            }
            Component::Prefix(_) => return Err(invalid("unexpected path prefix".into())),
        }
    }
    if normalised.as_os_str().is_empty() {
        return Err(invalid(
            "it names the hierarchy root, which cannot hold a container".into(),
        ));
    }
    if value.starts_with('/') {
        Ok(CgroupsPath::Absolute(Path::new("/").join(normalised)))
    } else {
        Ok(CgroupsPath::Relative(normalised))
    }
}

fn parse_systemd(value: &str) -> Result<CgroupsPath, PlacementError> {
    let invalid = |reason: String| PlacementError::InvalidSystemdPath {
        value: value.to_string(),
        reason,
    };
    let parts: Vec<&str> = value.split(':').collect();
    if parts.len() != 3 {
        return Err(invalid(format!(
            "it has {} ':'-separated parts, exactly 3 are required",
            parts.len()
        )));
    }
    let (slice, prefix, name) = (parts[0], parts[1], parts[2]);
    if value.contains('\0') {
        return Err(invalid("it contains a NUL byte".into()));
    }
    for (what, part) in [("prefix", prefix), ("name", name)] {
        if part.is_empty() {
            return Err(invalid(format!("the {what} is empty")));
        }
        if part.contains('/') {
            return Err(invalid(format!("the {what} {part:?} contains '/'")));
        }
        if part == "." || part == ".." {
            return Err(invalid(format!("the {what} {part:?} is not a unit name")));
        }
    }
    let slice = if slice.is_empty() {
        DEFAULT_SLICE
    } else {
        slice
    };
    // Validate the slice (and a slice-typed name) by expanding them.
    expand_slice(slice)?;
    if name.ends_with(".slice") {
        expand_slice(name)?;
    }
    let unit = unit_name(prefix, name);
    if unit.len() > MAX_COMPONENT_LEN {
        return Err(invalid(format!(
            "the unit name {unit:?} is {} bytes long (limit {MAX_COMPONENT_LEN})",
            unit.len()
        )));
    }
    Ok(CgroupsPath::Systemd {
        slice: slice.to_string(),
        prefix: prefix.to_string(),
        name: name.to_string(),
    })
}

/// Expands a systemd slice name into its cgroup path, as systemd and runc do:
/// `a-b-c.slice` -> `/a.slice/a-b.slice/a-b-c.slice`; `-.slice` is the root `/`.
pub fn expand_slice(slice: &str) -> Result<PathBuf, PlacementError> {
    let invalid = |reason: &str| PlacementError::InvalidSlice {
        slice: slice.to_string(),
        reason: reason.to_string(),
    };
    const SUFFIX: &str = ".slice";
    let Some(stem) = slice.strip_suffix(SUFFIX) else {
        return Err(invalid("it does not end in \".slice\""));
    };
    if stem.is_empty() {
        return Err(invalid("the name before \".slice\" is empty"));
    }
    if slice.contains('/') {
        return Err(invalid("it contains '/'"));
    }
    if slice.contains('\0') {
        return Err(invalid("it contains a NUL byte"));
    }
    if slice.len() > MAX_COMPONENT_LEN {
        return Err(invalid("it is longer than 255 bytes"));
    }
    if stem == "-" {
        return Ok(PathBuf::from("/"));
    }
    let mut path = PathBuf::from("/");
    let mut prefix = String::new();
    for component in stem.split('-') {
        if component.is_empty() {
            return Err(invalid(
                "it has an empty dash-separated part (leading, trailing or doubled '-')",
            ));
        }
        path.push(format!("{prefix}{component}{SUFFIX}"));
        prefix.push_str(component);
        prefix.push('-');
    }
    Ok(path)
}

/// Reads `SystemdCgroup` from a `runtimeoptions.v1.Options` `config_body` (TOML).
///
/// An empty body, or a body without the key, gives `Ok(None)`. A body that is not TOML,
/// or a `SystemdCgroup` that is not a boolean, is an error.
pub fn systemd_cgroup_option(config_body: &str) -> Result<Option<bool>, PlacementError> {
    if config_body.trim().is_empty() {
        return Ok(None);
    }
    let table: toml::Table =
        config_body
            .parse()
            .map_err(|e: toml::de::Error| PlacementError::InvalidOptions {
                reason: format!("not TOML ({})", e.message()),
            })?;
    match table.get("SystemdCgroup") {
        None => Ok(None),
        Some(toml::Value::Boolean(b)) => Ok(Some(*b)),
        Some(other) => Err(PlacementError::InvalidOptions {
            reason: format!("SystemdCgroup = {other} is not a boolean"),
        }),
    }
}

/// Checks that a container id can name a cgroup directory (used for the default path).
pub(crate) fn validate_container_id(id: &str) -> Result<(), PlacementError> {
    let invalid = |reason: &str| PlacementError::InvalidContainerId {
        id: id.to_string(),
        reason: reason.to_string(),
    };
    if id.is_empty() {
        return Err(invalid("it is empty"));
    }
    if id == "." || id == ".." {
        return Err(invalid("it is a relative path component"));
    }
    if id.contains('/') || id.contains(':') || id.contains('\0') {
        return Err(invalid("it contains '/', ':' or NUL"));
    }
    if id.len() > MAX_COMPONENT_LEN {
        return Err(invalid("it is longer than 255 bytes"));
    }
    Ok(())
}
