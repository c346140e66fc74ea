//! The locked-app JSON of Spin OCI artifacts: never a panic. Content by digest resolves to
//! an in-memory placeholder, as the shim resolves it to materialised blobs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use spin_runtime::app::{Content, ContentRef};

fuzz_target!(|data: &[u8]| {
    let resolve = |c: &ContentRef| -> anyhow::Result<Content> {
        match &c.digest {
            Some(d) => Ok(Content::Bytes(d.as_bytes().to_vec().into())),
            None => anyhow::bail!("no digest"),
        }
    };
    if let Ok(app) = spin_runtime::App::from_locked_json(data, &resolve) {
        for t in &app.http_triggers {
            assert!(app.components.contains_key(&t.component), "{t:?}");
        }
    }
});
