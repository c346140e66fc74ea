//! A gRPC client for the `helloworld.Greeter/SayHello` service of `tests/apps/spin-grpc`,
//! with tonic (a real gRPC library) and messages declared with prost, no generated code.

/// `helloworld.HelloRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloRequest {
    /// Who to greet; `fail` makes the app answer INVALID_ARGUMENT in the trailers.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `helloworld.HelloReply`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloReply {
    /// `Hello <name>`.
    #[prost(string, tag = "1")]
    pub message: String,
}

/// `helloworld.Greeter/SayHello` for `name` on `channel`: the reply's message, or the
/// call's status.
pub async fn say_hello(
    channel: tonic::transport::Channel,
    name: &str,
) -> Result<String, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let path = http::uri::PathAndQuery::from_static("/helloworld.Greeter/SayHello");
    let codec = tonic_prost::ProstCodec::<HelloRequest, HelloReply>::default();
    let request = tonic::Request::new(HelloRequest { name: name.into() });
    let reply = grpc.unary(request, path, codec).await?;
    Ok(reply.into_inner().message)
}

/// A channel to `base` (`http://` for h2c, `https://` verified against the PEM `ca` for the
/// server name `localhost`).
pub async fn channel(
    base: &str,
    ca: Option<Vec<u8>>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let mut endpoint = tonic::transport::Endpoint::from_shared(base.to_string())?;
    if let Some(ca) = ca {
        endpoint = endpoint.tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca))
                .domain_name("localhost"),
        )?;
    }
    endpoint.connect().await
}

/// `SayHello` for "tonic" and for "fail" at `base` (see [`channel`]), on a thread of its
/// own (callable from inside or outside a runtime): the first reply and the second call's
/// status.
pub fn hello_and_failure(
    base: &str,
    ca: Option<Vec<u8>>,
) -> Result<(String, tonic::Status), String> {
    let base = base.to_string();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let channel = channel(&base, ca)
                .await
                .map_err(|e| format!("connecting to {base}: {e:?}"))?;
            let reply = say_hello(channel.clone(), "tonic")
                .await
                .map_err(|s| format!("SayHello(tonic) at {base}: {s:?}"))?;
            match say_hello(channel, "fail").await {
                Ok(r) => Err(format!("SayHello(fail) at {base} succeeded: {r:?}")),
                Err(status) => Ok((reply, status)),
            }
        })
    })
    .join()
    .map_err(|_| "the gRPC client thread panicked".to_string())?
}
