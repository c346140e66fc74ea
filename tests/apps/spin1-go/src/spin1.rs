//! Spin 1.x's guest ABI, written by hand (wit-bindgen 0.2's lowering of Spin 1.x's WIT, as
//! the Spin Go SDK 2.2.1's generated C bindings in `http/`, `variables/`, `kv/` lay it out):
//! core imports from the modules `spin-config`, `wasi-outbound-http` and `key-value`, the
//! export `handle-http-request` with its 28-byte return area, and `canonical_abi_realloc` /
//! `canonical_abi_free` for what the host hands the guest. Shared by the spin1-* apps, with
//! the app's routes (`serve`).

use std::alloc::{alloc, dealloc, Layout};

#[link(wasm_import_module = "spin-config")]
extern "C" {
    #[link_name = "get-config"]
    fn spin_config_get_config(key_ptr: i32, key_len: i32, ret: i32);
}

#[link(wasm_import_module = "wasi-outbound-http")]
extern "C" {
    #[link_name = "request"]
    #[allow(clippy::too_many_arguments)]
    fn wasi_outbound_http_request(
        method: i32,
        uri_ptr: i32,
        uri_len: i32,
        headers_ptr: i32,
        headers_len: i32,
        params_ptr: i32,
        params_len: i32,
        body_is_some: i32,
        body_ptr: i32,
        body_len: i32,
        ret: i32,
    );
}

#[link(wasm_import_module = "key-value")]
extern "C" {
    #[link_name = "open"]
    fn key_value_open(name_ptr: i32, name_len: i32, ret: i32);
    #[link_name = "get"]
    fn key_value_get(store: i32, key_ptr: i32, key_len: i32, ret: i32);
    #[link_name = "set"]
    fn key_value_set(store: i32, key_ptr: i32, key_len: i32, v_ptr: i32, v_len: i32, ret: i32);
    #[link_name = "close"]
    fn key_value_close(store: i32);
}

#[link(wasm_import_module = "outbound-redis")]
extern "C" {
    #[link_name = "publish"]
    fn outbound_redis_publish(a: i32, al: i32, c: i32, cl: i32, p: i32, pl: i32, ret: i32);
    #[link_name = "get"]
    fn outbound_redis_get(a: i32, al: i32, k: i32, kl: i32, ret: i32);
    #[link_name = "set"]
    fn outbound_redis_set(a: i32, al: i32, k: i32, kl: i32, v: i32, vl: i32, ret: i32);
    #[link_name = "incr"]
    fn outbound_redis_incr(a: i32, al: i32, k: i32, kl: i32, ret: i32);
    #[link_name = "del"]
    fn outbound_redis_del(a: i32, al: i32, keys: i32, keys_len: i32, ret: i32);
}

/// `canonical_abi_realloc(ptr, orig_size, align, new_size)`, as wit-bindgen 0.2 exports it.
#[export_name = "canonical_abi_realloc"]
pub unsafe extern "C" fn canonical_abi_realloc(
    ptr: *mut u8,
    orig_size: usize,
    align: usize,
    new_size: usize,
) -> *mut u8 {
    if new_size == 0 {
        return align as *mut u8;
    }
    let layout = Layout::from_size_align(new_size, align).unwrap();
    let new = alloc(layout);
    if !ptr.is_null() && orig_size > 0 {
        std::ptr::copy_nonoverlapping(ptr, new, orig_size.min(new_size));
        dealloc(ptr, Layout::from_size_align(orig_size, align).unwrap());
    }
    new
}

/// `canonical_abi_free(ptr, size, align)`.
#[export_name = "canonical_abi_free"]
pub unsafe extern "C" fn canonical_abi_free(ptr: *mut u8, size: usize, align: usize) {
    if size > 0 {
        dealloc(ptr, Layout::from_size_align(size, align).unwrap());
    }
}

#[repr(C, align(8))]
struct RetArea([u8; 64]);

unsafe fn read_u8(p: i32) -> u8 {
    *(p as *const u8)
}
unsafe fn read_u16(p: i32) -> u16 {
    *(p as *const u16)
}
unsafe fn read_i32(p: i32) -> i32 {
    *(p as *const i32)
}
/// Takes ownership of a list the host allocated with `canonical_abi_realloc`.
unsafe fn read_bytes(ptr: i32, len: i32) -> Vec<u8> {
    std::slice::from_raw_parts(ptr as *const u8, len as usize).to_vec()
}
unsafe fn read_string(ptr: i32, len: i32) -> String {
    String::from_utf8_lossy(&read_bytes(ptr, len)).into_owned()
}
unsafe fn read_pairs(ptr: i32, len: i32) -> Vec<(String, String)> {
    (0..len)
        .map(|i| {
            let e = ptr + i * 16;
            (
                read_string(read_i32(e), read_i32(e + 4)),
                read_string(read_i32(e + 8), read_i32(e + 12)),
            )
        })
        .collect()
}
/// A list<tuple<string, string>> in guest memory (leaked: the instance serves one request).
fn write_pairs(pairs: &[(String, String)]) -> (i32, i32) {
    let flat: Vec<i32> = pairs
        .iter()
        .flat_map(|(k, v)| {
            let k = k.clone().leak();
            let v = v.clone().leak();
            [
                k.as_ptr() as i32,
                k.len() as i32,
                v.as_ptr() as i32,
                v.len() as i32,
            ]
        })
        .collect();
    let flat = flat.leak();
    (flat.as_ptr() as i32, pairs.len() as i32)
}

/// `spin-config` `get-config`: the value, or the error case's name and message.
pub fn get_config(key: &str) -> Result<String, String> {
    let mut ret = RetArea([0; 64]);
    let r = ret.0.as_mut_ptr() as i32;
    unsafe {
        spin_config_get_config(key.as_ptr() as i32, key.len() as i32, r);
        if read_u8(r) == 0 {
            Ok(read_string(read_i32(r + 4), read_i32(r + 8)))
        } else {
            let case =
                ["provider", "invalid-key", "invalid-schema", "other"][read_u8(r + 4) as usize];
            Err(format!(
                "{case}({})",
                read_string(read_i32(r + 8), read_i32(r + 12))
            ))
        }
    }
}

/// An HTTP response of Spin 1.x's `http-types`.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

const HTTP_ERRORS: [&str; 6] = [
    "success",
    "destination-not-allowed",
    "invalid-url",
    "request-error",
    "runtime-error",
    "too-many-requests",
];

/// `wasi-outbound-http` `request` (method 0 = GET ... 6 = OPTIONS).
pub fn send(
    method: i32,
    uri: &str,
    headers: &[(String, String)],
    body: Option<&[u8]>,
) -> Result<Response, String> {
    let mut ret = RetArea([0; 64]);
    let r = ret.0.as_mut_ptr() as i32;
    let (hp, hl) = write_pairs(headers);
    let (bs, bp, bl) = match body {
        Some(b) => (1, b.as_ptr() as i32, b.len() as i32),
        None => (0, 0, 0),
    };
    unsafe {
        wasi_outbound_http_request(
            method,
            uri.as_ptr() as i32,
            uri.len() as i32,
            hp,
            hl,
            0,
            0,
            bs,
            bp,
            bl,
            r,
        );
        if read_u8(r) != 0 {
            return Err(HTTP_ERRORS[read_u8(r + 4) as usize].to_string());
        }
        let status = read_u16(r + 4);
        let headers = if read_u8(r + 8) == 1 {
            read_pairs(read_i32(r + 12), read_i32(r + 16))
        } else {
            Vec::new()
        };
        let body = if read_u8(r + 20) == 1 {
            read_bytes(read_i32(r + 24), read_i32(r + 28))
        } else {
            Vec::new()
        };
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

const KV_ERRORS: [&str; 6] = [
    "store-table-full",
    "no-such-store",
    "access-denied",
    "invalid-store",
    "no-such-key",
    "io",
];

unsafe fn kv_error(r: i32) -> String {
    KV_ERRORS[read_u8(r + 4) as usize].to_string()
}

/// `key-value` `open`.
pub fn kv_open(name: &str) -> Result<i32, String> {
    let mut ret = RetArea([0; 64]);
    let r = ret.0.as_mut_ptr() as i32;
    unsafe {
        key_value_open(name.as_ptr() as i32, name.len() as i32, r);
        if read_u8(r) == 0 {
            Ok(read_i32(r + 4))
        } else {
            Err(kv_error(r))
        }
    }
}

/// `key-value` `get`.
pub fn kv_get(store: i32, key: &str) -> Result<Vec<u8>, String> {
    let mut ret = RetArea([0; 64]);
    let r = ret.0.as_mut_ptr() as i32;
    unsafe {
        key_value_get(store, key.as_ptr() as i32, key.len() as i32, r);
        if read_u8(r) == 0 {
            Ok(read_bytes(read_i32(r + 4), read_i32(r + 8)))
        } else {
            Err(kv_error(r))
        }
    }
}

/// `key-value` `set`.
pub fn kv_set(store: i32, key: &str, value: &[u8]) -> Result<(), String> {
    let mut ret = RetArea([0; 64]);
    let r = ret.0.as_mut_ptr() as i32;
    unsafe {
        key_value_set(
            store,
            key.as_ptr() as i32,
            key.len() as i32,
            value.as_ptr() as i32,
            value.len() as i32,
            r,
        );
        if read_u8(r) == 0 {
            Ok(())
        } else {
            Err(kv_error(r))
        }
    }
}

/// `key-value` `close`.
pub fn kv_close(store: i32) {
    unsafe { key_value_close(store) }
}

/// `outbound-redis` calls on server `address` (`expected<_, error>` results: a tag at 0,
/// the payload at 4, or at 8 for `s64`).
pub mod redis {
    use super::*;

    fn s(v: &str) -> (i32, i32) {
        (v.as_ptr() as i32, v.len() as i32)
    }

    unsafe fn check(r: i32) -> Result<(), String> {
        if read_u8(r) == 0 {
            Ok(())
        } else {
            Err("error".into())
        }
    }

    /// `publish`.
    pub fn publish(address: &str, channel: &str, payload: &[u8]) -> Result<(), String> {
        let mut ret = RetArea([0; 64]);
        let r = ret.0.as_mut_ptr() as i32;
        let ((a, al), (c, cl)) = (s(address), s(channel));
        unsafe {
            outbound_redis_publish(
                a,
                al,
                c,
                cl,
                payload.as_ptr() as i32,
                payload.len() as i32,
                r,
            );
            check(r)
        }
    }

    /// `get`.
    pub fn get(address: &str, key: &str) -> Result<Vec<u8>, String> {
        let mut ret = RetArea([0; 64]);
        let r = ret.0.as_mut_ptr() as i32;
        let ((a, al), (k, kl)) = (s(address), s(key));
        unsafe {
            outbound_redis_get(a, al, k, kl, r);
            check(r)?;
            Ok(read_bytes(read_i32(r + 4), read_i32(r + 8)))
        }
    }

    /// `set`.
    pub fn set(address: &str, key: &str, value: &[u8]) -> Result<(), String> {
        let mut ret = RetArea([0; 64]);
        let r = ret.0.as_mut_ptr() as i32;
        let ((a, al), (k, kl)) = (s(address), s(key));
        unsafe {
            outbound_redis_set(a, al, k, kl, value.as_ptr() as i32, value.len() as i32, r);
            check(r)
        }
    }

    /// `incr`.
    pub fn incr(address: &str, key: &str) -> Result<i64, String> {
        let mut ret = RetArea([0; 64]);
        let r = ret.0.as_mut_ptr() as i32;
        let ((a, al), (k, kl)) = (s(address), s(key));
        unsafe {
            outbound_redis_incr(a, al, k, kl, r);
            check(r)?;
            Ok(*((r + 8) as *const i64))
        }
    }

    /// `del`.
    pub fn del(address: &str, keys: &[&str]) -> Result<i64, String> {
        let mut ret = RetArea([0; 64]);
        let r = ret.0.as_mut_ptr() as i32;
        let (a, al) = s(address);
        let flat: Vec<i32> = keys.iter().flat_map(|k| [s(k).0, s(k).1]).collect();
        unsafe {
            outbound_redis_del(a, al, flat.as_ptr() as i32, keys.len() as i32, r);
            check(r)?;
            Ok(*((r + 8) as *const i64))
        }
    }
}

/// An inbound request of Spin 1.x's `http-types`.
pub struct Request {
    pub method: &'static str,
    pub uri: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
}

impl Request {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map_or("", |(_, v)| v.as_str())
    }
}

static mut RESPONSE_AREA: RetArea = RetArea([0; 64]);

/// Lifts a request from the flattened `handle-http-request` parameters.
///
/// # Safety
/// `p` holds the canonical lowering of `http-types.request` the host wrote.
pub unsafe fn lift_request(p: [i32; 10]) -> Request {
    Request {
        method: ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"][p[0] as usize],
        uri: read_string(p[1], p[2]),
        headers: read_pairs(p[3], p[4]),
        body: (p[7] == 1).then(|| read_bytes(p[8], p[9])),
    }
}

/// Lowers `resp` into the export's return area and returns its address.
///
/// # Safety
/// One call at a time (the instance is single-threaded).
pub unsafe fn lower_response(resp: Response) -> i32 {
    let r = std::ptr::addr_of_mut!(RESPONSE_AREA) as i32;
    *(r as *mut u16) = resp.status;
    let (hp, hl) = write_pairs(&resp.headers);
    *(r as *mut u8).add(4) = 1;
    *((r + 8) as *mut i32) = hp;
    *((r + 12) as *mut i32) = hl;
    let body = resp.body.leak();
    *(r as *mut u8).add(16) = 1;
    *((r + 20) as *mut i32) = body.as_ptr() as i32;
    *((r + 24) as *mut i32) = body.len() as i32;
    r
}

/// Defines the `handle-http-request` export: the 10 flat parameters of `http-types.request`,
/// the address of the response's return area back; it serves [`serve`] as `$flavour`.
macro_rules! export_handle_http_request {
    ($flavour:expr) => {
        /// Spin 1.x's HTTP entry point.
        ///
        /// # Safety
        /// Called by the host with the canonical lowering of `http-types.request`.
        #[export_name = "handle-http-request"]
        pub unsafe extern "C" fn handle_http_request(
            a0: i32,
            a1: i32,
            a2: i32,
            a3: i32,
            a4: i32,
            a5: i32,
            a6: i32,
            a7: i32,
            a8: i32,
            a9: i32,
        ) -> i32 {
            let req = spin1::lift_request([a0, a1, a2, a3, a4, a5, a6, a7, a8, a9]);
            spin1::lower_response(spin1::serve($flavour, &req))
        }
    };
}
pub(crate) use export_handle_http_request;

/// The key-value key where `handle-redis-message` keeps the last message.
pub const LAST_MESSAGE_KEY: &str = "last-redis-message";

/// Defines the `handle-redis-message` export (`payload` as a pointer and length, the
/// address of `expected<unit, error>` back): keeps the message in the `default` store under
/// [`LAST_MESSAGE_KEY`], or answers `error` when the message is `fail`.
#[allow(unused_macros)]
macro_rules! export_handle_redis_message {
    () => {
        /// Spin 1.x's Redis entry point.
        ///
        /// # Safety
        /// Called by the host with the canonical lowering of `payload`.
        #[export_name = "handle-redis-message"]
        pub unsafe extern "C" fn handle_redis_message(ptr: i32, len: i32) -> i32 {
            spin1::handle_redis_message(ptr, len)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use export_handle_redis_message;

/// The body of `handle-redis-message`.
///
/// # Safety
/// `ptr`, `len` is a list the host wrote.
#[allow(dead_code)]
pub unsafe fn handle_redis_message(ptr: i32, len: i32) -> i32 {
    let message = read_bytes(ptr, len);
    let r = std::ptr::addr_of_mut!(RESPONSE_AREA) as i32;
    let ok = message != b"fail"
        && kv_open("default")
            .and_then(|s| kv_set(s, LAST_MESSAGE_KEY, &message))
            .is_ok();
    *(r as *mut u8) = u8::from(!ok);
    *(r as *mut u8).add(1) = 1;
    r
}

/// The routes both spin1-* apps serve; `flavour` names the module shape.
pub fn serve(flavour: &str, req: &Request) -> Response {
    let path = req.uri.split('?').next().unwrap_or("");
    let text = |status: u16, body: String| Response {
        status,
        headers: vec![
            ("content-type".into(), "text/plain".into()),
            ("x-spin1-abi".into(), flavour.into()),
        ],
        body: body.into_bytes(),
    };
    match path {
        "/hello" => {
            let message = get_config("message").unwrap_or_else(|e| format!("error {e}"));
            let missing = get_config("not_declared").err().unwrap_or_default();
            text(
                200,
                format!("abi={flavour} route=/hello message={message} undeclared={missing}\n"),
            )
        }
        "/outbound" => {
            let url = get_config("upstream_url").unwrap_or_else(|e| format!("error {e}"));
            match send(0, &url, &[("x-from".into(), flavour.into())], None) {
                Ok(r) => {
                    let abi = r
                        .headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("x-spin1-abi"))
                        .map_or("", |(_, v)| v.as_str());
                    text(
                        200,
                        format!(
                            "abi={flavour} route=/outbound upstream={} upstream_abi={abi} {}",
                            r.status,
                            String::from_utf8_lossy(&r.body)
                        ),
                    )
                }
                Err(e) => text(502, format!("abi={flavour} route=/outbound error={e}\n")),
            }
        }
        "/deny" => match send(0, "http://denied.example.com/", &[], None) {
            Ok(r) => text(
                200,
                format!("abi={flavour} route=/deny upstream={}\n", r.status),
            ),
            Err(e) => text(502, format!("abi={flavour} route=/deny error={e}\n")),
        },
        "/last-redis-message" => match kv_open("default").and_then(|s| kv_get(s, LAST_MESSAGE_KEY))
        {
            Ok(v) => text(
                200,
                format!("abi={flavour} last={}\n", String::from_utf8_lossy(&v)),
            ),
            Err(e) => text(404, format!("abi={flavour} last-error={e}\n")),
        },
        "/redis" => {
            let result = (|| {
                let address = get_config("redis_address")?;
                redis::set(&address, "spin1-key", b"spin1-value")?;
                let got = redis::get(&address, "spin1-key")?;
                let n = redis::incr(&address, "spin1-counter")?;
                let deleted = redis::del(&address, &["spin1-key", "spin1-absent"])?;
                redis::publish(&address, "spin1-out", b"published by a Spin 1.x module")?;
                let denied = redis::get("redis://denied.example.com:6379", "k")
                    .err()
                    .unwrap_or_default();
                Ok::<_, String>(format!(
                    "abi={flavour} route=/redis get={} incr={n} del={deleted} denied={denied}\n",
                    String::from_utf8_lossy(&got)
                ))
            })();
            match result {
                Ok(body) => text(200, body),
                Err(e) => text(500, format!("abi={flavour} route=/redis error={e}\n")),
            }
        }
        "/kv" => {
            let result = (|| {
                let store = kv_open("default")?;
                let value = req.body.clone().unwrap_or_default();
                kv_set(store, "spin1-key", &value)?;
                let back = kv_get(store, "spin1-key")?;
                let missing = kv_get(store, "no-such-key").err().unwrap_or_default();
                kv_close(store);
                let other = kv_open("other").err().unwrap_or_default();
                Ok::<_, String>(format!(
                    "abi={flavour} route=/kv value={} missing={missing} other_store={other}\n",
                    String::from_utf8_lossy(&back)
                ))
            })();
            match result {
                Ok(body) => text(200, body),
                Err(e) => text(500, format!("abi={flavour} route=/kv error={e}\n")),
            }
        }
        _ => {
            let mut r = text(
                200,
                format!(
                    "abi={flavour} method={} uri={} x-test={} path-info={} body={}\n",
                    req.method,
                    req.uri,
                    req.header("x-test"),
                    req.header("spin-path-info"),
                    req.body
                        .as_deref()
                        .map(String::from_utf8_lossy)
                        .unwrap_or_default()
                ),
            );
            r.status = if req.method == "POST" { 201 } else { 200 };
            r.headers.push(("x-echo-method".into(), req.method.into()));
            r
        }
    }
}
