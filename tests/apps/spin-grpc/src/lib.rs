//! A unary gRPC method, written against wasi:http directly so that its status travels in
//! the response trailers as gRPC requires: `POST /helloworld.Greeter/SayHello` with a
//! `HelloRequest { string name = 1; }` answers `HelloReply { string message = 1; }`
//! ("Hello <name>") and trailers `grpc-status: 0`; the name `fail` gets no message and
//! `grpc-status: 3` (INVALID_ARGUMENT) with a `grpc-message`. Any other path answers
//! `200 text/plain` naming the method, path, `content-type`, `spin-full-url` and the request
//! body's length, with a trailer `x-trailer: done`; `/bytes/<n>` answers `n` bytes.
use spin_sdk::http::{Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam};
use spin_sdk::http_component;

/// The `string` field 1 of a protobuf message, if any.
fn field_one(msg: &[u8]) -> Option<String> {
    let mut i = 0;
    while i < msg.len() {
        let (key, n) = varint(&msg[i..])?;
        i += n;
        match key & 7 {
            0 => i += varint(&msg[i..])?.1,
            1 => i += 8,
            5 => i += 4,
            2 => {
                let (len, n) = varint(&msg[i..])?;
                let start = i + n;
                let end = start.checked_add(len as usize)?;
                let bytes = msg.get(start..end)?;
                if key >> 3 == 1 {
                    return String::from_utf8(bytes.to_vec()).ok();
                }
                i = end;
            }
            _ => return None,
        }
    }
    None
}

fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// A length-prefixed gRPC message holding `text` as string field 1.
fn grpc_message(text: &str) -> Vec<u8> {
    let mut msg = vec![0x0a];
    let mut len = text.len();
    while len >= 0x80 {
        msg.push((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    msg.push(len as u8);
    msg.extend_from_slice(text.as_bytes());
    let mut framed = vec![0];
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    framed
}

fn fields(pairs: &[(&str, &str)]) -> Fields {
    let list: Vec<(String, Vec<u8>)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect();
    Fields::from_list(&list).expect("valid fields")
}

/// Sends `status`, `headers`, `body` and then `trailers`.
fn respond(
    out: ResponseOutparam,
    status: u16,
    headers: &[(&str, &str)],
    body: &[u8],
    trailers: &[(&str, &str)],
) {
    let response = OutgoingResponse::new(fields(headers));
    response.set_status_code(status).expect("valid status");
    let outgoing = response.body().expect("body not taken");
    out.set(response);
    {
        let stream = outgoing.write().expect("body writable");
        for chunk in body.chunks(4096) {
            if stream.blocking_write_and_flush(chunk).is_err() {
                return;
            }
        }
    }
    let _ = OutgoingBody::finish(outgoing, Some(fields(trailers)));
}

#[http_component]
async fn handle(req: IncomingRequest, out: ResponseOutparam) {
    let path = req.path_with_query().unwrap_or_default();
    let method = format!("{:?}", req.method());
    let header = |name: &str| {
        req.headers()
            .get(name)
            .first()
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    let (content_type, full_url) = (header("content-type"), header("spin-full-url"));
    let body = req.into_body().await.unwrap_or_default();
    if let Some(n) = path.strip_prefix("/bytes/") {
        let body = vec![b'x'; n.parse().unwrap_or(0)];
        return respond(out, 200, &[("content-type", "text/plain")], &body, &[]);
    }
    if path != "/helloworld.Greeter/SayHello" {
        let text = format!(
            "method={method}\npath={path}\ncontent-type={content_type}\nfull-url={full_url}\n\
             body-len={}\n",
            body.len()
        );
        let headers = [("content-type", "text/plain")];
        return respond(
            out,
            200,
            &headers,
            text.as_bytes(),
            &[("x-trailer", "done")],
        );
    }
    let headers = [("content-type", "application/grpc")];
    let name = body.get(5..).and_then(field_one).unwrap_or_default();
    if name == "fail" {
        let trailers = [
            ("grpc-status", "3"),
            ("grpc-message", "the name must not be fail"),
        ];
        return respond(out, 200, &headers, b"", &trailers);
    }
    let reply = grpc_message(&format!("Hello {name}"));
    respond(out, 200, &headers, &reply, &[("grpc-status", "0")]);
}
