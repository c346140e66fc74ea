//! The DynamoDB-backed key-value store (`type = "aws_dynamo"`), with Spin's runtime-config
//! keys and item layout (spin-key-value-aws): one item per key, partition key `PK` (string) =
//! the key, `VAL` (binary) = the value; `increment` keeps the integer as decimal text in
//! `VAL`, as Spin does.

use base64::Engine as _;
use serde_json::{json, Value};

use super::{KeyValueBackend, KvError};
use crate::host::aws_json::{AwsCredentials, AwsError, AwsJsonClient};

/// Partition key attribute.
const PK: &str = "PK";
/// Value attribute.
const VAL: &str = "VAL";

/// How often `increment` retries when another writer changed the value in between.
const INCREMENT_ATTEMPTS: usize = 16;

/// At most this many `Scan` pages are read for the key list (each up to 1 MB).
const MAX_SCAN_PAGES: usize = 1024;

/// Why a DynamoDB store call failed.
#[derive(Debug, thiserror::Error)]
pub enum DynamoKvError {
    /// DynamoDB refused the call or could not be reached.
    #[error("DynamoDB table `{table}`: {source}")]
    Call {
        /// The table.
        table: String,
        /// What failed.
        source: AwsError,
    },
    /// An item's `VAL` is missing or not what this store writes.
    #[error("DynamoDB table `{table}`: key `{key}`: {what}")]
    BadItem {
        /// The table.
        table: String,
        /// The key.
        key: String,
        /// What is wrong.
        what: String,
    },
}

/// `[key_value_store.<label>] type = "aws_dynamo"`: Spin's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoDefinition {
    /// `table`.
    pub table: String,
    /// `region`.
    pub region: String,
    /// `consistent_read` (default false).
    pub consistent_read: bool,
    /// `access_key`, `secret_key`, `token`; `None`: the environment's
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`.
    pub credentials: Option<(String, String, Option<String>)>,
}

/// A store in a DynamoDB table.
#[derive(Debug)]
pub struct DynamoStore {
    label: String,
    table: String,
    consistent_read: bool,
    client: AwsJsonClient,
}

/// The process environment's value of the first of `names` that is set and not empty.
fn env_first(names: &[&str]) -> Option<String> {
    names
        .iter()
        .filter_map(|n| std::env::var(n).ok())
        .map(|v| v.trim().to_string())
        .find(|v| !v.is_empty())
}

impl DynamoStore {
    /// Checks the definition and credentials; the table is first reached on the first call.
    /// The endpoint is `https://dynamodb.<region>.amazonaws.com`, or `AWS_ENDPOINT_URL_DYNAMODB`
    /// / `AWS_ENDPOINT_URL` from the environment (as the AWS SDKs read them).
    pub fn open(label: &str, def: &DynamoDefinition) -> anyhow::Result<Self> {
        let credentials = match &def.credentials {
            Some((access_key, secret_key, token)) => AwsCredentials {
                access_key: access_key.clone(),
                secret_key: secret_key.clone(),
                token: token.clone(),
            },
            None => match (
                env_first(&["AWS_ACCESS_KEY_ID"]),
                env_first(&["AWS_SECRET_ACCESS_KEY"]),
            ) {
                (Some(access_key), Some(secret_key)) => AwsCredentials {
                    access_key,
                    secret_key,
                    token: env_first(&["AWS_SESSION_TOKEN"]),
                },
                _ => anyhow::bail!(
                    "key-value store `{label}` (aws_dynamo) has no credentials: set `access_key` \
                     and `secret_key` (and `token` for temporary credentials) in \
                     [key_value_store.{label}], or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
                     in the environment"
                ),
            },
        };
        let endpoint = env_first(&["AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL"])
            .unwrap_or_else(|| format!("https://dynamodb.{}.amazonaws.com", def.region));
        let client = AwsJsonClient::new(
            &endpoint,
            &def.region,
            "dynamodb",
            "DynamoDB_20120810",
            credentials,
        )
        .map_err(|e| {
            anyhow::anyhow!("key-value store `{label}` (aws_dynamo): DynamoDB endpoint {e}")
        })?;
        Ok(DynamoStore {
            label: label.to_string(),
            table: def.table.clone(),
            consistent_read: def.consistent_read,
            client,
        })
    }

    fn error(&self, source: DynamoKvError) -> KvError {
        KvError::Dynamo {
            label: self.label.clone(),
            source,
        }
    }

    async fn call(&self, action: &str, body: Value) -> Result<Value, AwsError> {
        self.client.call(action, &body).await
    }

    fn failed(&self, source: AwsError) -> KvError {
        self.error(DynamoKvError::Call {
            table: self.table.clone(),
            source,
        })
    }

    fn bad_item(&self, key: &str, what: impl Into<String>) -> KvError {
        self.error(DynamoKvError::BadItem {
            table: self.table.clone(),
            key: key.to_string(),
            what: what.into(),
        })
    }

    /// The item of `key` (only `attribute`), if any.
    async fn item(
        &self,
        key: &str,
        attribute: &str,
        consistent: bool,
    ) -> Result<Option<Value>, KvError> {
        let reply = self
            .call(
                "GetItem",
                json!({
                    "TableName": self.table,
                    "Key": { PK: { "S": key } },
                    "ConsistentRead": consistent,
                    "ProjectionExpression": attribute,
                }),
            )
            .await
            .map_err(|e| self.failed(e))?;
        Ok(reply.get("Item").cloned())
    }

    /// `VAL` of an item, decoded.
    fn value_of(&self, key: &str, item: &Value) -> Result<Vec<u8>, KvError> {
        let b64 = item
            .get(VAL)
            .and_then(|v| v.get("B"))
            .and_then(Value::as_str)
            .ok_or_else(|| self.bad_item(key, format!("the item has no binary `{VAL}`")))?;
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| self.bad_item(key, format!("`{VAL}` is not base64: {e}")))
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[async_trait::async_trait]
impl KeyValueBackend for DynamoStore {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        match self.item(key, VAL, self.consistent_read).await? {
            Some(item) => self.value_of(key, &item).map(Some),
            None => Ok(None),
        }
    }

    async fn set(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        self.call(
            "PutItem",
            json!({
                "TableName": self.table,
                "Item": { PK: { "S": key }, VAL: { "B": b64(value) } },
            }),
        )
        .await
        .map(drop)
        .map_err(|e| self.failed(e))
    }

    async fn delete(&self, key: &str) -> Result<(), KvError> {
        self.call(
            "DeleteItem",
            json!({ "TableName": self.table, "Key": { PK: { "S": key } } }),
        )
        .await
        .map(drop)
        .map_err(|e| self.failed(e))
    }

    async fn exists(&self, key: &str) -> Result<bool, KvError> {
        Ok(self.item(key, PK, self.consistent_read).await?.is_some())
    }

    async fn keys(&self) -> Result<Vec<String>, KvError> {
        let mut keys = Vec::new();
        let mut start: Option<Value> = None;
        for _ in 0..MAX_SCAN_PAGES {
            let mut body = json!({ "TableName": self.table, "ProjectionExpression": PK });
            if let Some(s) = start.take() {
                body["ExclusiveStartKey"] = s;
            }
            let reply = self.call("Scan", body).await.map_err(|e| self.failed(e))?;
            let items = reply.get("Items").and_then(Value::as_array);
            keys.extend(items.into_iter().flatten().filter_map(|item| {
                item.get(PK)
                    .and_then(|v| v.get("S"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            }));
            match reply.get("LastEvaluatedKey") {
                Some(last) if !last.is_null() => start = Some(last.clone()),
                _ => {
                    keys.sort();
                    return Ok(keys);
                }
            }
        }
        Err(self.bad_item(
            "*",
            format!("the key list has more than {MAX_SCAN_PAGES} Scan pages"),
        ))
    }

    async fn increment(&self, key: &str, delta: i64) -> Result<i64, KvError> {
        for _ in 0..INCREMENT_ATTEMPTS {
            let old = match self.item(key, VAL, true).await? {
                None => None,
                Some(item) => {
                    let bytes = self.value_of(key, &item)?;
                    let n = std::str::from_utf8(&bytes)
                        .ok()
                        .and_then(|s| s.parse::<i64>().ok())
                        .ok_or_else(|| {
                            self.bad_item(key, "the value is not an integer (decimal text)")
                        })?;
                    Some((n, bytes))
                }
            };
            let new = old.as_ref().map_or(0, |(n, _)| *n).wrapping_add(delta);
            match self
                .swap(
                    key,
                    old.map(|(_, b)| b).as_deref(),
                    new.to_string().as_bytes(),
                )
                .await
            {
                Ok(true) => return Ok(new),
                Ok(false) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(self.bad_item(
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
        self.swap(key, expected, value).await
    }
}

impl DynamoStore {
    /// A conditional `PutItem`: sets `key` to `value` only if `VAL` is still `expected`.
    async fn swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Result<bool, KvError> {
        let mut body = json!({
            "TableName": self.table,
            "Item": { PK: { "S": key }, VAL: { "B": b64(value) } },
            "ExpressionAttributeNames": { "#v": VAL },
        });
        match expected {
            None => body["ConditionExpression"] = json!("attribute_not_exists(#v)"),
            Some(old) => {
                body["ConditionExpression"] = json!("#v = :old");
                body["ExpressionAttributeValues"] = json!({ ":old": { "B": b64(old) } });
            }
        }
        match self.call("PutItem", body).await {
            Ok(_) => Ok(true),
            Err(e) if e.is("ConditionalCheckFailedException") => Ok(false),
            Err(e) => Err(self.failed(e)),
        }
    }
}
