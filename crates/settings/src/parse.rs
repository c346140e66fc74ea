//! Reading settings: who reads a variable ([`Role`]), environment lists ([`lookup`],
//! [`process_env`]) and the parsers for values; each error names the variable, the value
//! and the fix.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Who reads a variable, and so where it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The shim process and its helpers: the shim's environment (containerd's).
    Shim,
    /// The runtime inside a container: the container's environment (OCI spec).
    Container,
    /// `spin-serve`: its process environment.
    Serve,
}

impl Role {
    /// The name the README's table uses.
    pub fn name(self) -> &'static str {
        match self {
            Role::Shim => "shim",
            Role::Container => "container",
            Role::Serve => "spin-serve",
        }
    }

    /// Where the role's variables come from, for error messages.
    pub fn source(self) -> &'static str {
        match self {
            Role::Shim => "the shim's environment (containerd's)",
            Role::Container => "the container's environment",
            Role::Serve => "spin-serve's environment",
        }
    }
}

/// The value of `name` in `env` (a process's or a container's `KEY=VALUE` list): the last
/// one wins, as in a process environment built from the list.
pub fn lookup<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// This process's environment as a list (values that are not UTF-8 are left out: no
/// setting takes one).
pub fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// A setting with a value it cannot take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError {
    /// The variable.
    pub name: String,
    /// Its value.
    pub value: String,
    /// Where it was read.
    pub source: &'static str,
    /// What it takes instead.
    pub fix: String,
}

impl std::fmt::Display for SettingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}=`{}` in {}: {}, or unset it for the default",
            self.name, self.value, self.source, self.fix
        )
    }
}

impl std::error::Error for SettingError {}

/// Parses `60`, `60s`, `1500ms` or `2m`; `0` means "off" (`None`).
pub fn parse_duration(text: &str) -> Option<Option<Duration>> {
    let t = text.trim();
    let (number, unit_ms) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1000)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000)
    } else {
        (t, 1000)
    };
    let n: u64 = number.trim().parse().ok()?;
    Some((n > 0).then(|| Duration::from_millis(n.saturating_mul(unit_ms))))
}

/// Reads one role's variables from an environment list; absent and empty values are unset.
pub(crate) struct Reader<'a> {
    pub(crate) env: &'a [(String, String)],
    pub(crate) role: Role,
}

impl Reader<'_> {
    /// The trimmed value of `name`, `None` when unset or empty.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        lookup(self.env, name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
    }

    fn error(&self, name: &str, value: &str, fix: impl Into<String>) -> SettingError {
        SettingError {
            name: name.to_string(),
            value: value.to_string(),
            source: self.role.source(),
            fix: fix.into(),
        }
    }

    /// A whole number, at least `min`.
    pub(crate) fn number(
        &self,
        name: &str,
        min: u64,
        example: u64,
        default: u64,
    ) -> Result<u64, SettingError> {
        let Some(v) = self.get(name) else {
            return Ok(default);
        };
        match v.parse::<u64>() {
            Ok(n) if n >= min => Ok(n),
            _ => Err(self.error(
                name,
                v,
                format!("set it to a whole number of at least {min} (e.g. {example})"),
            )),
        }
    }

    /// A whole number of seconds above 0.
    pub(crate) fn positive_secs(&self, name: &str, default: u64) -> Result<Duration, SettingError> {
        self.number(name, 1, default, default)
            .map(Duration::from_secs)
    }

    /// A duration as [`parse_duration`] reads it; `None` is off.
    pub(crate) fn duration(
        &self,
        name: &str,
        default: Option<Duration>,
    ) -> Result<Option<Duration>, SettingError> {
        let Some(v) = self.get(name) else {
            return Ok(default);
        };
        parse_duration(v).ok_or_else(|| {
            self.error(
                name,
                v,
                "set it to seconds (`30`, `30s`), `500ms` or `2m`; `0` turns it off",
            )
        })
    }

    /// `0` or `1`.
    pub(crate) fn flag(&self, name: &str, default: bool) -> Result<bool, SettingError> {
        match self.get(name) {
            None => Ok(default),
            Some("1") => Ok(true),
            Some("0") => Ok(false),
            Some(v) => Err(self.error(name, v, "set it to 0 (off) or 1 (on)")),
        }
    }

    /// An `address:port`.
    pub(crate) fn addr(
        &self,
        name: &str,
        example: &str,
    ) -> Result<Option<SocketAddr>, SettingError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        v.parse()
            .map(Some)
            .map_err(|_| self.error(name, v, format!("set it to an address like {example}")))
    }

    /// A path (untrimmed: file names may hold spaces).
    pub(crate) fn path(&self, name: &str) -> Option<PathBuf> {
        lookup(self.env, name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    /// Seconds with a fraction, `0` none.
    pub(crate) fn fractional_secs(&self, name: &str) -> Result<Option<Duration>, SettingError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        match v.parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 && s < u32::MAX as f64 => {
                Ok(Some(Duration::from_secs_f64(s)).filter(|d| !d.is_zero()))
            }
            _ => Err(self.error(
                name,
                v,
                "set it to a number of seconds (e.g. 30 or 0.5); 0 for none",
            )),
        }
    }
}

/// An environment list of `pairs` (for tests).
#[cfg(test)]
pub(crate) fn env_list(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(env: &[(String, String)]) -> Reader<'_> {
        Reader {
            env,
            role: Role::Container,
        }
    }

    fn env(k: &str, v: &str) -> Vec<(String, String)> {
        vec![(k.to_string(), v.to_string())]
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60"), Some(Some(Duration::from_secs(60))));
        assert_eq!(
            parse_duration("1500ms"),
            Some(Some(Duration::from_millis(1500)))
        );
        assert_eq!(parse_duration(" 2m "), Some(Some(Duration::from_secs(120))));
        assert_eq!(parse_duration("0"), Some(None));
        assert_eq!(parse_duration("soon"), None);
        let e = env("X", "1h");
        let err = reader(&e).duration("X", None).unwrap_err().to_string();
        assert!(err.contains("X=`1h`") && err.contains("500ms"), "{err}");
    }

    #[test]
    fn numbers_flags_and_addresses_name_the_variable() {
        let e = env("N", "0");
        let err = reader(&e).number("N", 1, 7, 3).unwrap_err().to_string();
        assert!(err.contains("N=`0`") && err.contains("at least 1"), "{err}");
        let e = env("N", "");
        assert_eq!(reader(&e).number("N", 1, 7, 3).unwrap(), 3);
        let e = env("F", "yes");
        let err = reader(&e).flag("F", true).unwrap_err().to_string();
        assert!(
            err.contains("F=`yes`") && err.contains("0 (off) or 1 (on)"),
            "{err}"
        );
        let e = env("A", "localhost");
        let err = reader(&e).addr("A", "0.0.0.0:80").unwrap_err().to_string();
        assert!(err.contains("the container's environment"), "{err}");
        let e = env("S", "-1");
        assert!(reader(&e).fractional_secs("S").is_err());
        let e = env("S", "0.5");
        assert_eq!(
            reader(&e).fractional_secs("S").unwrap(),
            Some(Duration::from_millis(500))
        );
    }
}
