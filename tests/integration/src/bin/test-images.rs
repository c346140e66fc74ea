//! `test-images OUT_DIR`: writes the test image archives (pause, busybox, wasi-hello and,
//! when built, wasi-hello-p1) into OUT_DIR, exactly as the integration tests build them, for
//! scripts that import them elsewhere (the systemd node). `GUEST_APPS_DIR` as in the tests.

fn main() {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: test-images OUT_DIR");
        std::process::exit(2);
    };
    match integration::TestImages::build(std::path::Path::new(&out)) {
        Ok(images) => {
            for p in [&images.pause, &images.busybox, &images.wasi_hello]
                .into_iter()
                .chain(images.wasi_hello_p1.as_ref())
            {
                println!("{}", p.display());
            }
        }
        Err(e) => {
            eprintln!("test-images: {e:#}");
            std::process::exit(1);
        }
    }
}
