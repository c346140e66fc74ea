//! The apps of `tests/apps` built against published Spin SDKs, exactly as their templates
//! build them, with the routes each serves and what each answers: the integration and CRI
//! suites run every one through the shim.

use std::path::PathBuf;

use anyhow::{ensure, Context, Result};

use crate::workspace_root;

/// One SDK app.
#[derive(Debug, Clone, Copy)]
pub struct SdkApp {
    /// Directory under `tests/apps` holding its `spin.toml`.
    pub dir: &'static str,
    /// Language of the source.
    pub language: &'static str,
    /// SDK and version.
    pub sdk: &'static str,
    /// What the build targets (`wasip1` core module, `wasip2` or `wasip3` component).
    pub target: &'static str,
    /// The built component or module, under `tests/apps/target`.
    pub wasm: &'static str,
    /// Routes and their exact answers (status 200).
    pub routes: &'static [(&'static str, &'static str)],
}

const RUST_ROUTES_2: &[(&str, &str)] = &[
    (
        "/hello",
        "sdk=2 route=/hello greeting=hello from spin-sdk 2\n",
    ),
    ("/echo/a/b", "sdk=2 route=/echo path=/a/b\n"),
    (
        "/outbound/hello",
        "sdk=2 route=/outbound upstream=200 sdk=2 route=/hello greeting=hello from spin-sdk 2\n",
    ),
    (
        "/wasi",
        "sdk=2 route=/wasi wall_clock_after_2020=true monotonic=true utc_offset=0 \
         random_bytes=16 env_vars=0 file_size=56 \
         file=\"a file read through wasi:filesystem@0.2.0-rc-2023-10-18\" \
         tcp=create:access-denied\n",
    ),
];
const RUST_ROUTES_3: &[(&str, &str)] = &[
    (
        "/hello",
        "sdk=3 route=/hello greeting=hello from spin-sdk 3\n",
    ),
    ("/echo/a/b", "sdk=3 route=/echo path=/a/b\n"),
    (
        "/outbound/hello",
        "sdk=3 route=/outbound upstream=200 sdk=3 route=/hello greeting=hello from spin-sdk 3\n",
    ),
];
const RUST_ROUTES_5: &[(&str, &str)] = &[
    (
        "/hello",
        "sdk=5 route=/hello greeting=hello from spin-sdk 5\n",
    ),
    ("/echo/a/b", "sdk=5 route=/echo path=/a/b\n"),
    (
        "/outbound/hello",
        "sdk=5 route=/outbound upstream=200 sdk=5 route=/hello greeting=hello from spin-sdk 5\n",
    ),
];
const RUST_ROUTES_6: &[(&str, &str)] = &[
    (
        "/hello",
        "sdk=6 route=/hello greeting=hello from spin-sdk 6\n",
    ),
    ("/echo/a/b", "sdk=6 route=/echo path=/a/b\n"),
];

/// Every SDK app, most users first.
pub const SDK_APPS: &[SdkApp] = &[
    SdkApp {
        dir: "sdk5-http",
        language: "Rust",
        sdk: "spin-sdk 5.2.0",
        target: "wasip1",
        wasm: "wasm32-wasip1/release/sdk5_http.wasm",
        routes: RUST_ROUTES_5,
    },
    SdkApp {
        dir: "sdk5-http-p2",
        language: "Rust",
        sdk: "spin-sdk 5.2.0",
        target: "wasip2",
        wasm: "wasm32-wasip2/release/sdk5_http.wasm",
        routes: RUST_ROUTES_5,
    },
    SdkApp {
        dir: "sdk3-http",
        language: "Rust",
        sdk: "spin-sdk 3.1.1",
        target: "wasip1",
        wasm: "wasm32-wasip1/release/sdk3_http.wasm",
        routes: RUST_ROUTES_3,
    },
    SdkApp {
        dir: "sdk2-http",
        language: "Rust",
        sdk: "spin-sdk 2.2.0",
        target: "wasip1",
        wasm: "wasm32-wasip1/release/sdk2_http.wasm",
        routes: RUST_ROUTES_2,
    },
    SdkApp {
        dir: "sdk6-http",
        language: "Rust",
        sdk: "spin-sdk 6.0.0",
        target: "wasip3",
        wasm: "wasm32-wasip2/release/sdk6_http.wasm",
        routes: RUST_ROUTES_6,
    },
    SdkApp {
        dir: "js-sdk-hello",
        language: "JavaScript",
        sdk: "@spinframework/build-tools 1.0.7 (http-js template v3.6, componentize-js 0.19)",
        target: "wasip2",
        wasm: "js/js_sdk_hello.wasm",
        routes: &[("/", "Hello, Spin!"), ("/echo/a/b", "/echo/a/b")],
    },
    SdkApp {
        dir: "js-hello",
        language: "JavaScript",
        sdk: "componentize-js 0.23.0 (wasi:http, no JS SDK)",
        target: "wasip2",
        wasm: "js/js_hello.wasm",
        routes: &[("/", "hello from js\n"), ("/any/path", "hello from js\n")],
    },
    SdkApp {
        dir: "mw-app",
        language: "Rust",
        sdk:
            "HTTP middleware (wit-bindgen 0.57.1, wasi:http/middleware) in front of spin-sdk 6.0.0",
        target: "wasip3",
        wasm: "wasm32-wasip2/release/mw_upper.wasm",
        routes: &[
            (
                "/hello",
                "SDK=6 ROUTE=/HELLO GREETING=HELLO FROM SPIN-SDK 6\n",
            ),
            ("/echo/a/b", "sdk=6 route=/echo path=/a/b\n"),
        ],
    },
    SdkApp {
        dir: "py-spin-hello",
        language: "Python",
        sdk: "spin-sdk 3.4.1 (componentize-py 0.17.2)",
        target: "wasip2",
        wasm: "wasm32-wasip2/release/py_spin_hello.wasm",
        routes: &[
            ("/", "Hello from Python!"),
            ("/any/path", "Hello from Python!"),
        ],
    },
    SdkApp {
        dir: "py4-spin-hello",
        language: "Python",
        sdk: "spin-sdk 4.0.0 (componentize-py 0.23.0)",
        target: "wasip3",
        wasm: "wasm32-wasip2/release/py4_spin_hello.wasm",
        routes: &[
            ("/", "Hello from Python!"),
            ("/any/path", "Hello from Python!"),
        ],
    },
];

impl SdkApp {
    /// The app's directory.
    pub fn path(&self) -> PathBuf {
        workspace_root().join("tests/apps").join(self.dir)
    }

    /// The built component or module.
    pub fn wasm_path(&self) -> PathBuf {
        workspace_root().join("tests/apps/target").join(self.wasm)
    }

    /// Fails with the fix when the app has not been built.
    pub fn require_built(&self) -> Result<()> {
        let wasm = self.wasm_path();
        ensure!(
            wasm.is_file(),
            "{} is missing: run `make apps`",
            wasm.display()
        );
        Ok(())
    }

    /// Checks every route through `get` (path -> status, body); returns how many passed.
    pub fn check_routes(
        &self,
        mut get: impl FnMut(&str) -> Result<(u16, String)>,
    ) -> Result<usize> {
        for (path, want) in self.routes {
            let (status, body) = get(path).with_context(|| format!("{}: GET {path}", self.dir))?;
            ensure!(
                status == 200 && body == *want,
                "{}: GET {path}: {status} {body:?}, want 200 {want:?}",
                self.dir
            );
        }
        Ok(self.routes.len())
    }

    /// One row of the report: `language | sdk | target`.
    pub fn label(&self) -> String {
        format!("{} | {} | {}", self.language, self.sdk, self.target)
    }
}

/// VmRSS of `pid` in MiB (0 when gone).
pub fn rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|k| k / 1024)
        .unwrap_or(0)
}

/// The entry a tiered start's Cranelift code goes to, read off the name of the file the shim
/// reserved for it in the compile cache (`.tmp-reserved-<pid>-<seq>-<entry>`, see
/// `spin_runtime::engine::compile_cache`); `None` for any other file name.
pub fn reserved_entry(file_name: &str) -> Option<&str> {
    file_name
        .strip_prefix(".tmp-reserved-")?
        .splitn(3, '-')
        .nth(2)
}

/// Whether process `pid` has the compile-cache entry `entry` mapped (its code swapped in).
pub fn maps_entry(pid: u32, entry: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|m| m.contains(&format!("/{entry}")))
}
