//! A private PKI made with the openssl CLI as an operator would make one: a CA
//! (`ca.pem`, `ca.key`), a server certificate for `localhost` and 127.0.0.1 (`server.pem`,
//! `server.key`) and a client certificate (`client.pem`, `client.key`), RSA 2048, valid
//! two days. One-step issuing needs OpenSSL 3 (`req -x509 -CA`), Debian 12's.

use std::path::Path;
use std::process::Command;

/// Runs `openssl` with `args` in `dir`; panics with its stderr on failure.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes the CA, server and client key pairs into `dir` (see the module's doc).
pub fn make_pki(dir: &Path) {
    let key = ["-newkey", "rsa:2048", "-nodes", "-days", "2"];
    let mut ca = vec!["req", "-x509"];
    ca.extend(key);
    ca.extend([
        "-subj",
        "/CN=test ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(dir, &ca);
    for (name, ext) in [
        (
            "server",
            [
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
                "extendedKeyUsage=serverAuth",
            ],
        ),
        (
            "client",
            ["subjectAltName=DNS:client", "extendedKeyUsage=clientAuth"],
        ),
    ] {
        let (subj, keyout, out) = (
            format!("/CN={name}"),
            format!("{name}.key"),
            format!("{name}.pem"),
        );
        let mut leaf = vec!["req", "-x509"];
        leaf.extend(key);
        leaf.extend(["-subj", &subj, "-CA", "ca.pem", "-CAkey", "ca.key"]);
        leaf.extend(["-addext", "basicConstraints=critical,CA:FALSE"]);
        leaf.extend(["-addext", ext[0], "-addext", ext[1]]);
        leaf.extend(["-keyout", &keyout, "-out", &out]);
        openssl(dir, &leaf);
    }
}
