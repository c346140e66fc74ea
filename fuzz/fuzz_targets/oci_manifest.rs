//! The OCI image index / manifest reader of the artifact loader: never a panic, and every
//! descriptor it returns has a digest that is safe as a file name.
#![no_main]

use containerd_shim_wasm::image::{read_image_document, ImageDocument};
use libfuzzer_sys::fuzz_target;

fn safe(digest: &str) {
    let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
    assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{digest:?}");
}

fuzz_target!(|data: &[u8]| {
    match read_image_document(data, "fuzz") {
        Ok(ImageDocument::Index(Some(d))) => safe(&d.digest),
        Ok(ImageDocument::Manifest { config, layers }) => {
            safe(&config.digest);
            layers.iter().for_each(|l| safe(&l.digest));
        }
        _ => {}
    }
});
