//! `spin-command [exit <code> | exit-code <code>] [args...]`: prints
//! `argv=<arg>|<arg>|...`; `exit <code>` ends through Rust's `std::process::exit` (on
//! wasm32-wasip2 that is `wasi:cli/exit.exit`, success or failure only: any code but 0
//! arrives as 1), `exit-code <code>` through `wasi:cli/exit.exit-with-code` (WASI 0.2.12),
//! which carries the code itself.

fn code_after(args: &[String], flag: &str) -> Option<i32> {
    let i = args.iter().position(|a| a == flag)?;
    Some(
        args.get(i + 1)
            .and_then(|c| c.parse().ok())
            .expect("the flag takes a number"),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    println!("argv={}", args.join("|"));
    if let Some(code) = code_after(&args, "exit-code") {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        wasip2::cli::exit::exit_with_code(code as u8);
    }
    if let Some(code) = code_after(&args, "exit") {
        std::process::exit(code);
    }
}
