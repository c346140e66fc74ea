//! Serverless AI: `fermyon:spin/llm@2.0.0`, as Spin 3.x answers it.
//!
//! - A model the component does not list in `ai_models` is refused with Spin's
//!   `invalid-input` text.
//! - Without `[llm_compute]` in the runtime config (or with `type = "spin"`), inference runs
//!   nowhere: this runtime has no local model engine, and it answers what Spin built
//!   without its local engine answers (`runtime-error`, "Local LLM operations are not
//!   supported in this version of Spin.").
//! - `[llm_compute] type = "remote_http"` sends the calls to a Spin "cloud-gpu" style
//!   service, as Spin's `spin-llm-remote-http` (default API) does: `POST <url>/infer`
//!   `{model, prompt, options}` and `POST <url>/embed` `{model, input}`, with
//!   `authorization: bearer <auth_token>`.
//! - With `api_type = "open_ai"` the same calls use OpenAI's API, as Spin's does:
//!   `POST <url>/v1/chat/completions` (the prompt as one user message, `max_completion_tokens`
//!   from `max-tokens`, `frequency_penalty` from `repeat-penalty`; the first choice's
//!   message is the text) and `POST <url>/v1/embeddings` `{model, input}`; an `error` answer
//!   becomes `runtime-error` with its message.
//!
//! HTTPS is verified against the runtime's trust store ([`super::tls::trust_store`]).
//!
//! ```toml
//! [llm_compute]
//! type = "remote_http"
//! url = "https://llm.example.com"
//! auth_token = "..."
//! # api_type = "open_ai"
//! ```

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use super::bindings::fermyon::spin2_0_0::llm as v2;
use super::feature::HostFeature;
use super::sqlite::MAX_RESULT_BYTES;

/// The message of Spin built without a local LLM engine.
pub const NO_LOCAL_ENGINE: &str = "Local LLM operations are not supported in this version of Spin.";

/// Where inference runs (`[llm_compute]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LlmCompute {
    /// No engine (the default, and `type = "spin"`): calls fail with [`NO_LOCAL_ENGINE`].
    #[default]
    None,
    /// A remote HTTP service (`type = "remote_http"`).
    RemoteHttp {
        /// Base URL of the service.
        url: http::Uri,
        /// Bearer token sent with every call.
        auth_token: String,
        /// The service's API (`api_type`).
        api: LlmApi,
    },
}

/// The API a `remote_http` service speaks (`api_type`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LlmApi {
    /// Spin's own (`/infer`, `/embed`), the default.
    #[default]
    Spin,
    /// OpenAI's (`/v1/chat/completions`, `/v1/embeddings`).
    OpenAi,
}

/// The LLM host feature: `[llm_compute]` and `fermyon:spin/llm@2.0.0`.
pub struct Llm;

/// What one component's instances may use: its `ai_models` and the app's service.
#[derive(Clone)]
pub struct ComponentLlm {
    models: Arc<BTreeSet<String>>,
    compute: Arc<LlmCompute>,
}

impl HostFeature for Llm {
    const SECTIONS: &'static [&'static str] = &["llm_compute"];
    type Config = LlmCompute;
    type App = Arc<LlmCompute>;
    type Instance = ComponentLlm;

    fn parse(source: &super::runtime_config::Source<'_>) -> anyhow::Result<LlmCompute> {
        match source.take("llm_compute") {
            Some(v) => parse_runtime_config(v, source.origin()),
            None => Ok(LlmCompute::None),
        }
    }

    fn build(
        config: &LlmCompute,
        _: &super::feature::AppContext<'_>,
    ) -> anyhow::Result<Arc<LlmCompute>> {
        Ok(Arc::new(config.clone()))
    }

    fn instance(
        app: &Arc<LlmCompute>,
        cx: &super::feature::ComponentContext<'_>,
    ) -> anyhow::Result<ComponentLlm> {
        Ok(ComponentLlm {
            models: Arc::new(cx.component.ai_models.iter().cloned().collect()),
            compute: app.clone(),
        })
    }

    fn add_to_linker<T: Send + 'static>(
        linker: &mut wasmtime::component::Linker<T>,
        get: fn(&mut T) -> &mut ComponentLlm,
    ) -> anyhow::Result<()> {
        Ok(v2::add_to_linker::<
            T,
            wasmtime::component::HasSelf<ComponentLlm>,
        >(linker, get)?)
    }
}

/// Parses the `[llm_compute]` section of a runtime config.
pub fn parse_runtime_config(section: &toml::Value, origin: &str) -> anyhow::Result<LlmCompute> {
    let table = section
        .as_table()
        .with_context(|| format!("{origin}: `llm_compute` must be a table"))?;
    super::runtime_config::warn_unknown_keys(
        table,
        &["type", "url", "auth_token", "api_type"],
        "llm_compute",
        origin,
    );
    let str_field = |name: &str| -> anyhow::Result<Option<&str>> {
        match table.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .with_context(|| format!("{origin}: `llm_compute.{name}` must be a string")),
        }
    };
    match str_field("type")? {
        None => anyhow::bail!(
            "{origin}: `llm_compute.type` is missing (use type = \"remote_http\" with url and \
             auth_token)"
        ),
        Some("spin") => Ok(LlmCompute::None),
        Some("remote_http") => {
            let url = str_field("url")?
                .with_context(|| format!("{origin}: `llm_compute.url` is missing"))?;
            let auth_token = str_field("auth_token")?
                .with_context(|| format!("{origin}: `llm_compute.auth_token` is missing"))?;
            let api = match str_field("api_type")? {
                None | Some("default") => LlmApi::Spin,
                Some("open_ai") => LlmApi::OpenAi,
                Some(other) => anyhow::bail!(
                    "{origin}: `llm_compute.api_type` = \"{other}\" is not an API type; use \
                     \"default\" or \"open_ai\""
                ),
            };
            let url: http::Uri = url
                .parse()
                .with_context(|| format!("{origin}: `llm_compute.url` = `{url}` is not a URL"))?;
            if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
                anyhow::bail!(
                    "{origin}: `llm_compute.url` = `{url}` must be an http:// or https:// URL"
                );
            }
            Ok(LlmCompute::RemoteHttp {
                url,
                auth_token: auth_token.to_string(),
                api,
            })
        }
        Some(other) => anyhow::bail!(
            "{origin}: `llm_compute.type` = \"{other}\" is not supported; use \"remote_http\""
        ),
    }
}

fn access_denied(model: &str) -> v2::Error {
    v2::Error::InvalidInput(format!(
        "The component does not have access to use '{model}'. To give the component access, \
         add '{model}' to the 'ai_models' key for the component in your spin.toml manifest"
    ))
}

/// `POST <base>/<path>` with a JSON body; the response body (capped) on success.
async fn post(
    base: &http::Uri,
    auth_token: &str,
    path: &str,
    body: serde_json::Value,
) -> Result<Vec<u8>, v2::Error> {
    let runtime = |msg: String| v2::Error::RuntimeError(msg);
    let uri: http::Uri = format!(
        "{}://{}{path}",
        base.scheme_str().unwrap_or("http"),
        base.authority().map(|a| a.as_str()).unwrap_or_default()
    )
    .parse()
    .map_err(|_| runtime("Failed to create URL".into()))?;
    let https = uri.scheme_str() == Some("https");
    let request = http::Request::post(uri)
        .header("authorization", format!("bearer {auth_token}"))
        .header("content-type", "application/json")
        .body(
            Full::new(Bytes::from(body.to_string()))
                .map_err(|never: std::convert::Infallible| match never {})
                .boxed_unsync(),
        )
        .map_err(|_| runtime("Failed to create authorization header".into()))?;
    let failed = |e| runtime(format!("POST {path} request error: {e:?}"));
    let (response, io): (_, Pin<Box<dyn Future<Output = _> + Send>>) = if https {
        let config = super::tls::trust_store().http.clone();
        let (response, io) = super::tls::send(request, None, config)
            .await
            .map_err(failed)?;
        (response, Box::into_pin(io))
    } else {
        let (response, io) = wasmtime_wasi_http::default_send_request(request, None)
            .await
            .map_err(failed)?;
        (response.map(BodyExt::boxed_unsync), Box::pin(io))
    };
    let io = tokio::spawn(io);
    let mut body = response.into_body();
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| runtime(format!("POST {path} request error: {e:?}")))?;
        if let Ok(data) = frame.into_data() {
            out.extend_from_slice(&data);
            if out.len() > MAX_RESULT_BYTES {
                return Err(runtime(format!(
                    "query result exceeds limit of {MAX_RESULT_BYTES} bytes"
                )));
            }
        }
    }
    drop(io);
    Ok(out)
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct InferUsage {
    prompt_token_count: u32,
    generated_token_count: u32,
}

#[derive(serde::Deserialize)]
struct InferResponse {
    text: String,
    usage: InferUsage,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct EmbedUsage {
    prompt_token_count: u32,
}

#[derive(serde::Deserialize)]
struct EmbedResponse {
    embeddings: Vec<Vec<f32>>,
    usage: EmbedUsage,
}

#[derive(serde::Deserialize)]
struct OpenAiError {
    message: String,
}

#[derive(serde::Deserialize)]
struct OpenAiMessage {
    content: String,
}

#[derive(serde::Deserialize)]
struct OpenAiChoice {
    message: OpenAiMessage,
}

#[derive(serde::Deserialize)]
struct OpenAiChatUsage {
    prompt_tokens: u32,
    completion_tokens: u32,
}

/// An OpenAI answer: the result or `{"error": {"message": ..}}`.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum OpenAiAnswer<T> {
    Ok(T),
    Err { error: OpenAiError },
}

#[derive(serde::Deserialize)]
struct OpenAiChat {
    choices: Vec<OpenAiChoice>,
    usage: OpenAiChatUsage,
}

#[derive(serde::Deserialize)]
struct OpenAiEmbedding {
    embedding: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct OpenAiEmbedUsage {
    prompt_tokens: u32,
}

#[derive(serde::Deserialize)]
struct OpenAiEmbeddings {
    data: Vec<OpenAiEmbedding>,
    usage: OpenAiEmbedUsage,
}

/// `bytes` as an OpenAI answer of `path`: the result, the service's error message, or the
/// deserialisation failure (as Spin words it).
fn open_ai_answer<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    path: &str,
) -> Result<T, v2::Error> {
    match serde_json::from_slice::<OpenAiAnswer<T>>(bytes) {
        Ok(OpenAiAnswer::Ok(v)) => Ok(v),
        Ok(OpenAiAnswer::Err { error }) => Err(v2::Error::RuntimeError(error.message)),
        Err(e) => Err(v2::Error::RuntimeError(format!(
            "Failed to deserialize response for \"POST  {path}\": {e}"
        ))),
    }
}

impl v2::Host for ComponentLlm {
    async fn infer(
        &mut self,
        model: String,
        prompt: String,
        params: Option<v2::InferencingParams>,
    ) -> wasmtime::Result<Result<v2::InferencingResult, v2::Error>> {
        if !self.models.contains(&model) {
            return Ok(Err(access_denied(&model)));
        }
        otel_export::count_llm_infer(&model);
        let LlmCompute::RemoteHttp {
            url,
            auth_token,
            api,
        } = &*self.compute
        else {
            return Ok(Err(v2::Error::RuntimeError(NO_LOCAL_ENGINE.into())));
        };
        // Spin's defaults when the guest gives no parameters.
        let p = params.unwrap_or(v2::InferencingParams {
            max_tokens: 100,
            repeat_penalty: 1.1,
            repeat_penalty_last_n_token_count: 64,
            temperature: 0.8,
            top_k: 40,
            top_p: 0.9,
        });
        if *api == LlmApi::OpenAi {
            const PATH: &str = "/v1/chat/completions";
            let body = serde_json::json!({
                "messages": [{ "role": "user", "content": prompt }],
                "model": model,
                "max_completion_tokens": p.max_tokens,
                "frequency_penalty": p.repeat_penalty,
            });
            let bytes = match post(url, auth_token, PATH, body).await {
                Ok(b) => b,
                Err(e) => return Ok(Err(e)),
            };
            return Ok(
                open_ai_answer::<OpenAiChat>(&bytes, PATH).map(|r| v2::InferencingResult {
                    text: r
                        .choices
                        .into_iter()
                        .next()
                        .map(|c| c.message.content)
                        .unwrap_or_default(),
                    usage: v2::InferencingUsage {
                        prompt_token_count: r.usage.prompt_tokens,
                        generated_token_count: r.usage.completion_tokens,
                    },
                }),
            );
        }
        let body = serde_json::json!({
            "model": model,
            "prompt": prompt,
            "options": {
                "maxTokens": p.max_tokens,
                "repeatPenalty": p.repeat_penalty,
                "repeatPenaltyLastNTokenCount": p.repeat_penalty_last_n_token_count,
                "temperature": p.temperature,
                "topK": p.top_k,
                "topP": p.top_p,
            },
        });
        let bytes = match post(url, auth_token, "/infer", body).await {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        Ok(match serde_json::from_slice::<InferResponse>(&bytes) {
            Ok(r) => Ok(v2::InferencingResult {
                text: r.text,
                usage: v2::InferencingUsage {
                    prompt_token_count: r.usage.prompt_token_count,
                    generated_token_count: r.usage.generated_token_count,
                },
            }),
            Err(e) => Err(v2::Error::RuntimeError(format!(
                "Failed to deserialize response for \"POST  /index\": {e}"
            ))),
        })
    }

    async fn generate_embeddings(
        &mut self,
        model: String,
        text: Vec<String>,
    ) -> wasmtime::Result<Result<v2::EmbeddingsResult, v2::Error>> {
        if !self.models.contains(&model) {
            return Ok(Err(access_denied(&model)));
        }
        let LlmCompute::RemoteHttp {
            url,
            auth_token,
            api,
        } = &*self.compute
        else {
            return Ok(Err(v2::Error::RuntimeError(NO_LOCAL_ENGINE.into())));
        };
        let body = serde_json::json!({ "model": model, "input": text });
        if *api == LlmApi::OpenAi {
            const PATH: &str = "/v1/embeddings";
            let bytes = match post(url, auth_token, PATH, body).await {
                Ok(b) => b,
                Err(e) => return Ok(Err(e)),
            };
            return Ok(open_ai_answer::<OpenAiEmbeddings>(&bytes, PATH).map(|r| {
                v2::EmbeddingsResult {
                    embeddings: r.data.into_iter().map(|d| d.embedding).collect(),
                    usage: v2::EmbeddingsUsage {
                        prompt_token_count: r.usage.prompt_tokens,
                    },
                }
            }));
        }
        let bytes = match post(url, auth_token, "/embed", body).await {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        Ok(match serde_json::from_slice::<EmbedResponse>(&bytes) {
            Ok(r) => Ok(v2::EmbeddingsResult {
                embeddings: r.embeddings,
                usage: v2::EmbeddingsUsage {
                    prompt_token_count: r.usage.prompt_token_count,
                },
            }),
            Err(e) => Err(v2::Error::RuntimeError(format!(
                "Failed to deserialize response  for \"POST  /embed\": {e}"
            ))),
        })
    }
}
