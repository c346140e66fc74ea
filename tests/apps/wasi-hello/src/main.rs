//! WASI test guest used by the integration tests.
//!
//! Always prints `Hello from wasi-hello`, then one `arg[i]=...` line per argument and one
//! `env NAME=VALUE` line per environment variable (sorted), then runs the command given by
//! its first argument after the program name:
//! - `exit N`  : exits with status N
//! - `trap`    : executes the Wasm `unreachable` instruction (a trap, not a clean exit)
//! - `sleep S` : sleeps S seconds, then exits 0
//! - `burn S`  : burns CPU for S seconds, then exits 0
//! - `ls DIR`  : prints `entry NAME` for each entry of DIR (sorted), then exits 0
//! - anything else or nothing: exits 0
//!
//! Exit codes other than 0/1 need the core-module build (`wasi-hello-p1`): a WASI 0.2
//! component can only exit with ok or err (`wasi:cli/exit`), which runtimes report as 0/1.
use std::time::{Duration, Instant};

fn seconds(arg: Option<&String>, cmd: &str) -> f64 {
    match arg.and_then(|s| s.parse::<f64>().ok()) {
        Some(s) if s >= 0.0 => s,
        _ => {
            eprintln!("wasi-hello: `{cmd}` needs a number of seconds, e.g. `{cmd} 2`");
            std::process::exit(2);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    println!("Hello from wasi-hello");
    for (i, a) in args.iter().enumerate() {
        println!("arg[{i}]={a}");
    }
    let mut env: Vec<(String, String)> = std::env::vars().collect();
    env.sort();
    for (k, v) in env {
        println!("env {k}={v}");
    }
    let cmd = args.get(1).map(String::as_str).unwrap_or("");
    match cmd {
        "exit" => {
            let code = args
                .get(2)
                .and_then(|s| s.parse::<i32>().ok())
                .unwrap_or_else(|| {
                    eprintln!("wasi-hello: `exit` needs a status, e.g. `exit 3`");
                    std::process::exit(2);
                });
            std::process::exit(code);
        }
        "trap" => {
            eprintln!("wasi-hello: about to trap");
            #[cfg(target_family = "wasm")]
            core::arch::wasm32::unreachable();
            #[cfg(not(target_family = "wasm"))]
            std::process::abort();
        }
        "sleep" => {
            let s = seconds(args.get(2), "sleep");
            println!("sleeping {s}s");
            std::thread::sleep(Duration::from_secs_f64(s));
            println!("slept {s}s");
        }
        "burn" => {
            let s = seconds(args.get(2), "burn");
            println!("burning CPU for {s}s");
            let end = Instant::now() + Duration::from_secs_f64(s);
            let mut x: u64 = 1;
            while Instant::now() < end {
                for _ in 0..100_000 {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                }
                std::hint::black_box(x);
            }
            println!("burned {s}s");
        }
        "ls" => {
            let dir = args.get(2).map(String::as_str).unwrap_or("/");
            let mut names: Vec<String> = match std::fs::read_dir(dir) {
                Ok(rd) => rd
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect(),
                Err(e) => {
                    eprintln!("wasi-hello: cannot list {dir}: {e}");
                    std::process::exit(1);
                }
            };
            names.sort();
            for n in names {
                println!("entry {n}");
            }
        }
        // Any other first argument is just an argument: printed above, exit 0.
        _ => {}
    }
}
