//! The tar reader of Spin archive layers (`wasm_shim_core::untrusted::tarball`): never a
//! panic, and what it holds for a member stays within its caps whatever the headers
//! declare (a GNU long name is at most 4096 bytes, a PAX path at most 1 MiB).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasm_shim_core::untrusted::tarball::{TarReader, MAX_LONG_NAME_BYTES, MAX_PAX_BYTES};

fuzz_target!(|data: &[u8]| {
    let mut r = TarReader::new(data);
    let mut buf = [0u8; 4096];
    // Each member takes at least one 512-byte block of the input.
    for _ in 0..=data.len() / 512 {
        match r.next_entry() {
            Ok(Some(e)) => {
                assert!(e.path.len() as u64 <= MAX_LONG_NAME_BYTES.max(MAX_PAX_BYTES));
                let mut got = 0u64;
                while let Ok(n) = r.read_data(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got += n as u64;
                }
                assert!(got <= e.size && got <= data.len() as u64);
            }
            Ok(None) | Err(_) => break,
        }
    }
});
