//! The Azure Cosmos DB-backed key-value store (`type = "azure_cosmos"`), with Spin's
//! runtime-config keys and document layout (spin-key-value-azure): one document per key in a
//! container partitioned on `/id`, `{"id": key, "value": [bytes as numbers]}`; `increment`
//! keeps a number in `value`, as Spin's does. Spoken over Cosmos DB's REST API with the
//! account's master key (`key`); Microsoft Entra ID credentials are not supported.

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{json, Value};

use super::{KeyValueBackend, KvError};
use crate::host::aws_json::{check_endpoint, send};

/// The REST API version sent (`x-ms-version`).
const API_VERSION: &str = "2018-12-31";

/// How often `increment` retries when another writer changed the document in between.
const INCREMENT_ATTEMPTS: usize = 16;

/// At most this many query pages are read for the key list.
const MAX_QUERY_PAGES: usize = 1024;

/// Characters Spin refuses in keys (they cannot appear in a document id).
const ILLEGAL_KEY_CHARS: [char; 4] = ['/', '\\', '?', '#'];

/// Why a Cosmos DB store call failed.
#[derive(Debug, thiserror::Error)]
pub enum CosmosKvError {
    /// No answer (connection, TLS, timeout) or one that is not Cosmos DB's JSON.
    #[error("Cosmos DB container `{container}`: {source:#}")]
    Transport {
        /// The container.
        container: String,
        /// What failed.
        source: anyhow::Error,
    },
    /// Cosmos DB answered with an error status.
    #[error("Cosmos DB container `{container}`: HTTP {status}: {message}")]
    Service {
        /// The container.
        container: String,
        /// The HTTP status.
        status: u16,
        /// The service's `code` and `message`.
        message: String,
    },
    /// A key or document this store cannot use.
    #[error("Cosmos DB container `{container}`: key `{key}`: {what}")]
    BadKey {
        /// The container.
        container: String,
        /// The key.
        key: String,
        /// What is wrong.
        what: String,
    },
}

/// `[key_value_store.<label>] type = "azure_cosmos"`: Spin's keys, plus `endpoint`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CosmosDefinition {
    /// `key`: the account's primary or secondary key (base64).
    pub key: String,
    /// `account`: the endpoint is `https://<account>.documents.azure.com`.
    pub account: String,
    /// `database`.
    pub database: String,
    /// `container` (partition key path `/id`).
    pub container: String,
    /// `endpoint` (this runtime's addition, not Spin's): another endpoint URL, e.g. the
    /// Cosmos DB emulator.
    pub endpoint: Option<String>,
}

/// A store in a Cosmos DB container.
pub struct CosmosStore {
    label: String,
    container: String,
    endpoint: http::Uri,
    /// `dbs/<database>/colls/<container>`.
    collection: String,
    key: ring::hmac::Key,
}

impl std::fmt::Debug for CosmosStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is left out.
        f.debug_struct("CosmosStore")
            .field("label", &self.label)
            .field("collection", &self.collection)
            .finish()
    }
}

/// One reply: status, `etag`, `x-ms-continuation`, JSON body (`Null` if empty).
struct Reply {
    status: u16,
    etag: Option<String>,
    continuation: Option<String>,
    body: Value,
}

/// A percent-encoded path segment.
fn segment(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

impl CosmosStore {
    /// Checks the definition (the key must be base64); the container is first reached on the
    /// first call.
    pub fn open(label: &str, def: &CosmosDefinition) -> anyhow::Result<Self> {
        use base64::Engine as _;
        let secret = base64::engine::general_purpose::STANDARD
            .decode(def.key.trim())
            .map_err(|e| {
                anyhow::anyhow!(
                    "key-value store `{label}` (azure_cosmos): `key` is not base64 ({e}): use the \
                     account's primary or secondary key as the portal shows it"
                )
            })?;
        let endpoint = def
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://{}.documents.azure.com", def.account));
        let uri: http::Uri = endpoint.parse().map_err(|e| {
            anyhow::anyhow!("key-value store `{label}` (azure_cosmos): `{endpoint}`: {e}")
        })?;
        check_endpoint(&uri)
            .map_err(|e| anyhow::anyhow!("key-value store `{label}` (azure_cosmos): {e}"))?;
        Ok(CosmosStore {
            label: label.to_string(),
            container: def.container.clone(),
            endpoint: uri,
            collection: format!("dbs/{}/colls/{}", def.database, def.container),
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret),
        })
    }

    fn error(&self, source: CosmosKvError) -> KvError {
        KvError::Cosmos {
            label: self.label.clone(),
            source,
        }
    }

    fn bad_key(&self, key: &str, what: impl Into<String>) -> KvError {
        self.error(CosmosKvError::BadKey {
            container: self.container.clone(),
            key: key.to_string(),
            what: what.into(),
        })
    }

    /// The `authorization` header of a request (master-key token).
    fn authorization(&self, verb: &str, resource_link: &str, date: &str) -> String {
        use base64::Engine as _;
        let text = format!(
            "{}\ndocs\n{resource_link}\n{}\n\n",
            verb.to_lowercase(),
            date.to_lowercase()
        );
        let sig = ring::hmac::sign(&self.key, text.as_bytes());
        let token = format!(
            "type=master&ver=1.0&sig={}",
            base64::engine::general_purpose::STANDARD.encode(sig.as_ref())
        );
        url::form_urlencoded::byte_serialize(token.as_bytes()).collect()
    }

    /// Sends `verb` to the container's documents (`id`: one document), with `partition` the
    /// partition key and `headers` besides the signed ones.
    async fn request(
        &self,
        verb: &str,
        id: Option<&str>,
        partition: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Result<Reply, KvError> {
        let (path, link) = match id {
            Some(id) => (
                format!("/{}/docs/{}", self.collection, segment(id)),
                format!("{}/docs/{id}", self.collection),
            ),
            None => (
                format!("/{}/docs", self.collection),
                self.collection.clone(),
            ),
        };
        let date = chrono::Utc::now()
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let transport = |e: anyhow::Error| {
            self.error(CosmosKvError::Transport {
                container: self.container.clone(),
                source: e,
            })
        };
        let mut builder = http::Request::builder()
            .method(verb)
            .uri(&path)
            .header("host", self.endpoint.authority().map_or("", |a| a.as_str()))
            .header("authorization", self.authorization(verb, &link, &date))
            .header("x-ms-date", &date)
            .header("x-ms-version", API_VERSION)
            .header("accept", "application/json");
        if let Some(p) = partition {
            builder = builder.header("x-ms-documentdb-partitionkey", json!([p]).to_string());
        }
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        if !headers.iter().any(|(k, _)| *k == "content-type") {
            builder = builder.header("content-type", "application/json");
        }
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        let request = builder
            .body(Full::new(body))
            .map_err(|e| transport(e.into()))?;
        let reply = send(&self.endpoint, request).await.map_err(transport)?;
        let header = |name: &str| {
            reply
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let (etag, continuation) = (header("etag"), header("x-ms-continuation"));
        let status = reply.status().as_u16();
        let bytes = reply.into_body();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|e| {
                transport(anyhow::anyhow!(
                    "HTTP {status}: the reply is not JSON ({e}): {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                ))
            })?
        };
        Ok(Reply {
            status,
            etag,
            continuation,
            body,
        })
    }

    /// `reply` unless its status is an error other than those in `expected`.
    fn check(&self, reply: Reply, expected: &[u16]) -> Result<Reply, KvError> {
        if reply.status < 300 || expected.contains(&reply.status) {
            return Ok(reply);
        }
        let field = |n: &str| reply.body.get(n).and_then(Value::as_str).unwrap_or("");
        Err(self.error(CosmosKvError::Service {
            container: self.container.clone(),
            status: reply.status,
            message: format!("{}: {}", field("code"), field("message")),
        }))
    }

    /// The document of `key` and its etag, if any.
    async fn read(&self, key: &str) -> Result<Option<(Value, Option<String>)>, KvError> {
        let reply = self.request("GET", Some(key), Some(key), &[], None).await?;
        let reply = self.check(reply, &[404])?;
        Ok((reply.status != 404).then_some((reply.body, reply.etag)))
    }

    /// The bytes of a document written by `set`.
    fn bytes_of(&self, key: &str, doc: &Value) -> Result<Vec<u8>, KvError> {
        doc.get("value")
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter()
                    .map(|n| n.as_u64().and_then(|n| u8::try_from(n).ok()))
                    .collect::<Option<Vec<u8>>>()
            })
            .ok_or_else(|| self.bad_key(key, "the document's `value` is not a list of bytes"))
    }

    /// Writes `doc` for `key`: as a new document (`etag` `None`), or replacing the one whose
    /// etag is given; `false` if another writer got there first.
    async fn write_if(&self, key: &str, doc: Value, etag: Option<&str>) -> Result<bool, KvError> {
        let reply = match etag {
            None => {
                self.request("POST", None, Some(key), &[], Some(doc))
                    .await?
            }
            Some(etag) => {
                self.request(
                    "PUT",
                    Some(key),
                    Some(key),
                    &[("if-match", etag)],
                    Some(doc),
                )
                .await?
            }
        };
        let reply = self.check(reply, &[409, 412])?;
        Ok(!matches!(reply.status, 409 | 412))
    }
}

#[async_trait::async_trait]
impl KeyValueBackend for CosmosStore {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        match self.read(key).await? {
            Some((doc, _)) => self.bytes_of(key, &doc).map(Some),
            None => Ok(None),
        }
    }

    async fn set(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        if key.contains(ILLEGAL_KEY_CHARS) {
            return Err(self.bad_key(
                key,
                format!(
                    "keys must not contain any of {}",
                    ILLEGAL_KEY_CHARS.iter().collect::<String>()
                ),
            ));
        }
        let doc = json!({ "id": key, "value": value });
        let reply = self
            .request(
                "POST",
                None,
                Some(key),
                &[("x-ms-documentdb-is-upsert", "True")],
                Some(doc),
            )
            .await?;
        self.check(reply, &[]).map(drop)
    }

    async fn delete(&self, key: &str) -> Result<(), KvError> {
        let reply = self
            .request("DELETE", Some(key), Some(key), &[], None)
            .await?;
        self.check(reply, &[404]).map(drop)
    }

    async fn exists(&self, key: &str) -> Result<bool, KvError> {
        Ok(self.read(key).await?.is_some())
    }

    async fn keys(&self) -> Result<Vec<String>, KvError> {
        let mut keys = Vec::new();
        let mut continuation: Option<String> = None;
        for _ in 0..MAX_QUERY_PAGES {
            let mut headers = vec![
                ("x-ms-documentdb-isquery", "True"),
                ("content-type", "application/query+json"),
                ("x-ms-documentdb-query-enablecrosspartition", "True"),
            ];
            if let Some(c) = &continuation {
                headers.push(("x-ms-continuation", c.as_str()));
            }
            let query = json!({ "query": "SELECT c.id FROM c", "parameters": [] });
            let reply = self
                .request("POST", None, None, &headers, Some(query))
                .await?;
            let reply = self.check(reply, &[])?;
            let docs = reply.body.get("Documents").and_then(Value::as_array);
            keys.extend(
                docs.into_iter()
                    .flatten()
                    .filter_map(|d| d.get("id").and_then(Value::as_str).map(str::to_string)),
            );
            match reply.continuation {
                Some(c) if !c.is_empty() => continuation = Some(c),
                _ => {
                    keys.sort();
                    return Ok(keys);
                }
            }
        }
        Err(self.bad_key(
            "*",
            format!("the key list has more than {MAX_QUERY_PAGES} pages"),
        ))
    }

    async fn increment(&self, key: &str, delta: i64) -> Result<i64, KvError> {
        for _ in 0..INCREMENT_ATTEMPTS {
            let (old, etag) = match self.read(key).await? {
                None => (0, None),
                Some((doc, etag)) => {
                    let n = doc.get("value").and_then(Value::as_i64).ok_or_else(|| {
                        self.bad_key(key, "the document's `value` is not a counter (a number)")
                    })?;
                    (n, etag)
                }
            };
            let new = old.wrapping_add(delta);
            if self
                .write_if(key, json!({ "id": key, "value": new }), etag.as_deref())
                .await?
            {
                return Ok(new);
            }
        }
        Err(self.bad_key(
            key,
            format!("other writers changed the value during {INCREMENT_ATTEMPTS} attempts"),
        ))
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Result<bool, KvError> {
        let current = self.read(key).await?;
        let etag = match (&current, expected) {
            (None, None) => None,
            (Some((doc, etag)), Some(old)) if self.bytes_of(key, doc)? == old => etag.clone(),
            _ => return Ok(false),
        };
        self.write_if(key, json!({ "id": key, "value": value }), etag.as_deref())
            .await
    }
}
