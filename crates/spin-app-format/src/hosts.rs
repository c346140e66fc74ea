//! The deprecated `allowed_http_hosts` key, converted to `allowed_outbound_hosts` entries as
//! Spin's manifest compatibility code (`compat::convert_allowed_http_to_allowed_hosts`) does:
//! a host (with optional port) allows it over both `http://` and `https://`; `self` becomes
//! `http://self`; `insecure:allow-all` allows `http://*:*`, `https://*:*` and `http://self`.

const ALLOW_ALL: &str = "insecure:allow-all";

/// Converts `allowed_http_hosts` entries. With `allow_database_access` (Spin 1 manifests
/// without `allowed_outbound_hosts`) Redis, MySQL and PostgreSQL anywhere are allowed too, as
/// they were before outbound hosts existed. Errors name the bad entry.
pub fn convert_allowed_http_hosts(
    hosts: &[String],
    allow_database_access: bool,
) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = if allow_database_access {
        vec![
            "redis://*:*".into(),
            "mysql://*:*".into(),
            "postgres://*:*".into(),
        ]
    } else {
        Vec::new()
    };
    if hosts.iter().any(|h| h == ALLOW_ALL) {
        out.extend([
            "http://*:*".into(),
            "https://*:*".into(),
            "http://self".into(),
        ]);
        return Ok(out);
    }
    let mut errors = Vec::new();
    for h in hosts {
        match parse_host(h) {
            Ok((host, _)) if host == "self" => out.push("http://self".into()),
            Ok((host, port)) => {
                let port = port.map(|p| format!(":{p}")).unwrap_or_default();
                out.push(format!("http://{host}{port}"));
                out.push(format!("https://{host}{port}"));
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(format!(
            "one or more allowed_http_hosts entries is invalid: {}",
            errors.join("; ")
        ))
    }
}

/// `host[:port]`, `http(s)://host[:port][/]`; the host may be an `[ipv6]` literal.
fn parse_host(text: &str) -> Result<(String, Option<u16>), String> {
    let t = crate::untrusted::shown(text);
    let rest = if text.contains("//") {
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(format!("{t} isn't a valid HTTP host URL"));
        };
        if scheme != "http" && scheme != "https" {
            return Err(format!("{t} isn't a valid host or host:port string"));
        }
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') {
            return Err(format!(
                "{t} contains a path, should be host and optional port only"
            ));
        }
        rest
    } else {
        text
    };
    let (host, port) = if let Some(end) = rest.strip_prefix('[').and_then(|r| r.find(']')) {
        let host = &rest[..end + 2];
        let after = &rest[end + 2..];
        match after.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if after.is_empty() => (host, None),
            None => return Err(format!("{t} isn't a valid host or host:port string")),
        }
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    let valid_host = !host.is_empty()
        && (host.starts_with('[')
            || host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'));
    if !valid_host {
        return Err(format!("{t} isn't a valid host or host:port string"));
    }
    let port = match port {
        Some(p) => Some(
            p.parse::<u16>()
                .map_err(|_| format!("{t} isn't a valid host or host:port string"))?,
        ),
        None => None,
    };
    Ok((host.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(h: &[&str]) -> Result<Vec<String>, String> {
        convert_allowed_http_hosts(&h.iter().map(|s| s.to_string()).collect::<Vec<_>>(), false)
    }

    #[test]
    fn as_spin_converts() {
        assert_eq!(
            conv(&["spin.fermyon.dev"]).unwrap(),
            ["http://spin.fermyon.dev", "https://spin.fermyon.dev"]
        );
        assert_eq!(
            conv(&["localhost:3001"]).unwrap(),
            ["http://localhost:3001", "https://localhost:3001"]
        );
        assert_eq!(
            conv(&["https://x.org:5555/"]).unwrap(),
            ["http://x.org:5555", "https://x.org:5555"]
        );
        assert_eq!(
            conv(&["http://[::1]:8001"]).unwrap(),
            ["http://[::1]:8001", "https://[::1]:8001"]
        );
        assert_eq!(conv(&["self"]).unwrap(), ["http://self"]);
        assert_eq!(
            conv(&["a.com", "insecure:allow-all"]).unwrap(),
            ["http://*:*", "https://*:*", "http://self"]
        );
        assert!(conv(&["http://x.org/a"]).unwrap_err().contains("path"));
        assert!(conv(&["ftp://x.org"]).is_err());
        let with_db = convert_allowed_http_hosts(&[], true).unwrap();
        assert_eq!(with_db, ["redis://*:*", "mysql://*:*", "postgres://*:*"]);
    }
}
