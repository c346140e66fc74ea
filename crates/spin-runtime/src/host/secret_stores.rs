//! Variables providers that read secrets from a store over HTTPS, as Spin's `vault`,
//! `openbao` and `azure_key_vault` providers do, written from the services' published HTTP
//! APIs:
//! - HashiCorp Vault / OpenBao, KV secrets engine version 2: `GET {url}/v1/{mount}/data/
//!   {prefix/}{name}` with `X-Vault-Token`; the value is the secret's `value` field, a 404
//!   means "not in this store" (the next provider is asked).
//! - Azure Key Vault: an access token from Microsoft Entra ID's token endpoint
//!   (`{authority}/{tenant}/oauth2/v2.0/token`, client credentials: a client secret, or the
//!   workload-identity token file as client assertion), then `GET {vault_url}/secrets/{name}
//!   ?api-version=7.4` with it; a 404 (`SecretNotFound`) means "not in this store".
//!
//! Values are read once per process and kept (variables are resolved when the app starts);
//! every other answer fails the start with an error naming the provider, the variable and
//! what the store said. HTTPS verifies the server with the runtime's trust store
//! ([`super::tls::trust_store`]); the proxy comes from `HTTPS_PROXY`/`NO_PROXY`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};

/// Longest answer read from a secret store or token endpoint.
const MAX_ANSWER_BYTES: u64 = 1 << 20;
/// Bound on each request (connect, TLS, answer).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Key Vault REST API version used.
const KEY_VAULT_API_VERSION: &str = "7.4";

/// Where an Azure access token comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum AzureCredential {
    /// A service principal's client secret (`client_id`, `client_secret`, `tenant_id` in
    /// the runtime config, or `AZURE_CLIENT_ID`/`AZURE_CLIENT_SECRET`/`AZURE_TENANT_ID`).
    ClientSecret {
        /// Entra ID tenant.
        tenant: String,
        /// The application (client) id.
        client_id: String,
        /// The client secret.
        secret: String,
    },
    /// Workload identity: `AZURE_FEDERATED_TOKEN_FILE` holds a Kubernetes service-account
    /// token, sent as the client assertion.
    FederatedToken {
        /// Entra ID tenant.
        tenant: String,
        /// The application (client) id.
        client_id: String,
        /// The token file.
        token_file: String,
    },
}

/// A secret store a `[[variables_provider]]` names.
#[derive(Clone, PartialEq, Eq)]
pub enum Store {
    /// `type = "vault"` or `"openbao"`.
    Vault {
        /// `vault` or `openbao`, for messages.
        kind: &'static str,
        /// The server's base URL.
        url: String,
        /// The token.
        token: String,
        /// The KV v2 engine's mount.
        mount: String,
        /// The path prefix of every secret.
        prefix: Option<String>,
    },
    /// `type = "azure_key_vault"`.
    AzureKeyVault {
        /// `https://<name>.vault.azure.net` (or another cloud's).
        vault_url: String,
        /// The identity provider's base URL (`authority_host`); `None`:
        /// `AZURE_AUTHORITY_HOST`, else Azure's public cloud.
        authority: Option<String>,
        /// How the token is obtained; `None`: from the `AZURE_*` environment.
        credential: Option<AzureCredential>,
    },
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Store::Vault {
                kind, url, mount, ..
            } => write!(f, "{kind} at {url} (mount {mount})"),
            Store::AzureKeyVault { vault_url, .. } => write!(f, "azure_key_vault at {vault_url}"),
        }
    }
}

/// A [`Store`] with the values it already gave.
pub struct Remote {
    /// The store.
    pub store: Store,
    read: Mutex<HashMap<String, Option<String>>>,
    token: Mutex<Option<String>>,
}

impl PartialEq for Remote {
    fn eq(&self, other: &Self) -> bool {
        self.store == other.store
    }
}
impl Eq for Remote {}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.store.fmt(f)
    }
}

/// Azure's named clouds (`authority_host` in Spin's runtime config) and their identity
/// providers.
pub fn azure_authority(name: &str) -> Option<&'static str> {
    Some(match name {
        "AzurePublicCloud" => "https://login.microsoftonline.com",
        "AzureChina" => "https://login.chinacloudapi.cn",
        "AzureGovernment" => "https://login.microsoftonline.us",
        "AzureGermany" => "https://login.microsoftonline.de",
        _ => return None,
    })
}

/// The token scope of the Key Vault at `vault_url`: its cloud's `https://vault.<suffix>/
/// .default` (public cloud's for a URL of no known cloud).
fn key_vault_scope(vault_url: &str) -> String {
    let host = url::Url::parse(vault_url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    let suffix = [
        "vault.azure.cn",
        "vault.usgovcloudapi.net",
        "vault.microsoftazure.de",
    ]
    .into_iter()
    .find(|s| host.ends_with(&format!(".{s}")))
    .unwrap_or("vault.azure.net");
    format!("https://{suffix}/.default")
}

impl Remote {
    /// The store, nothing read yet.
    pub fn new(store: Store) -> Arc<Self> {
        Arc::new(Remote {
            store,
            read: Mutex::new(HashMap::new()),
            token: Mutex::new(None),
        })
    }

    /// The value of variable `name` in this store (`None`: the store does not have it);
    /// `env` is the container's environment.
    pub fn get(&self, name: &str, env: &HashMap<String, String>) -> anyhow::Result<Option<String>> {
        if let Some(v) = self
            .read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return Ok(v.clone());
        }
        let value = match &self.store {
            Store::Vault {
                kind,
                url,
                token,
                mount,
                prefix,
            } => {
                let path = match prefix {
                    Some(p) => format!("{}/{name}", p.trim_matches('/')),
                    None => name.to_string(),
                };
                let target = format!(
                    "{}/v1/{}/data/{path}",
                    url.trim_end_matches('/'),
                    mount.trim_matches('/')
                );
                let (status, body) = send(agent().get(&target).header("X-Vault-Token", token))
                    .with_context(|| format!("{kind} provider: reading `{name}` at {target}"))?;
                match status {
                    200 => Some(vault_value(&body).with_context(|| {
                        format!("{kind} provider: secret `{path}` in mount `{mount}`")
                    })?),
                    404 => None,
                    s => bail!(
                        "{kind} provider: reading `{name}` at {target} answered HTTP {s}: {} \
                         (check the provider's `token` and `mount`, and the token's policy)",
                        answer_text(&body)
                    ),
                }
            }
            Store::AzureKeyVault { vault_url, .. } => {
                let target = format!(
                    "{}/secrets/{name}?api-version={KEY_VAULT_API_VERSION}",
                    vault_url.trim_end_matches('/')
                );
                let token = self.azure_token(env)?;
                let (status, body) = send(
                    agent()
                        .get(&target)
                        .header("Authorization", &format!("Bearer {token}")),
                )
                .with_context(|| {
                    format!("azure_key_vault provider: reading `{name}` at {target}")
                })?;
                match status {
                    200 => {
                        let v: serde_json::Value = serde_json::from_slice(&body)
                            .context("azure_key_vault provider: the answer is not JSON")?;
                        Some(
                            v.get("value")
                                .and_then(|v| v.as_str())
                                .with_context(|| {
                                    format!(
                                        "azure_key_vault provider: secret `{name}` has no \
                                         string `value`"
                                    )
                                })?
                                .to_string(),
                        )
                    }
                    404 => None,
                    s => bail!(
                        "azure_key_vault provider: reading `{name}` at {target} answered HTTP \
                         {s}: {} (check the identity's access policy or role on the vault)",
                        answer_text(&body)
                    ),
                }
            }
        };
        self.read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), value.clone());
        Ok(value)
    }

    /// An Entra ID access token for the Key Vault (asked once per process).
    fn azure_token(&self, env: &HashMap<String, String>) -> anyhow::Result<String> {
        let Store::AzureKeyVault {
            vault_url,
            authority,
            credential,
        } = &self.store
        else {
            unreachable!("only Key Vault stores ask for Azure tokens")
        };
        let mut cached = self.token.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = cached.as_ref() {
            return Ok(t.clone());
        }
        let scope = key_vault_scope(vault_url);
        let credential = match credential {
            Some(c) => c.clone(),
            None => azure_credential_from_env(env).context(
                "azure_key_vault provider: the runtime config gives no client_id, \
                 client_secret and tenant_id",
            )?,
        };
        let authority = authority.clone().unwrap_or_else(|| {
            env.get("AZURE_AUTHORITY_HOST")
                .filter(|v| !v.is_empty())
                .cloned()
                .unwrap_or_else(|| "https://login.microsoftonline.com".into())
        });
        let (tenant, mut form) = match &credential {
            AzureCredential::ClientSecret {
                tenant,
                client_id,
                secret,
            } => (
                tenant,
                vec![
                    ("client_id", client_id.clone()),
                    ("client_secret", secret.clone()),
                ],
            ),
            AzureCredential::FederatedToken {
                tenant,
                client_id,
                token_file,
            } => {
                let assertion = std::fs::read_to_string(token_file).with_context(|| {
                    format!(
                        "azure_key_vault provider: reading the workload identity token \
                         AZURE_FEDERATED_TOKEN_FILE={token_file}"
                    )
                })?;
                (
                    tenant,
                    vec![
                        ("client_id", client_id.clone()),
                        (
                            "client_assertion_type",
                            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".into(),
                        ),
                        ("client_assertion", assertion.trim().to_string()),
                    ],
                )
            }
        };
        form.push(("grant_type", "client_credentials".into()));
        form.push(("scope", scope));
        let endpoint = format!(
            "{}/{tenant}/oauth2/v2.0/token",
            authority.trim_end_matches('/')
        );
        let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let answer = agent()
            .post(&endpoint)
            .send_form(pairs)
            .map_err(anyhow::Error::from)
            .and_then(read_answer);
        let (status, body) = answer.with_context(|| {
            format!("azure_key_vault provider: asking {endpoint} for an access token")
        })?;
        if status != 200 {
            bail!(
                "azure_key_vault provider: {endpoint} refused a token (HTTP {status}): {} \
                 (check client_id, tenant_id and the client secret or federated credential)",
                answer_text(&body)
            );
        }
        let v: serde_json::Value =
            serde_json::from_slice(&body).context("azure_key_vault provider: token answer")?;
        let token = v
            .get("access_token")
            .and_then(|t| t.as_str())
            .context("azure_key_vault provider: the token answer has no `access_token`")?
            .to_string();
        *cached = Some(token.clone());
        Ok(token)
    }
}

/// The Azure credential the `AZURE_*` environment gives, as Azure's SDKs read it: a
/// client secret, else a workload-identity token file.
fn azure_credential_from_env(env: &HashMap<String, String>) -> anyhow::Result<AzureCredential> {
    let get = |k: &str| env.get(k).filter(|v| !v.is_empty()).cloned();
    let (Some(tenant), Some(client_id)) = (get("AZURE_TENANT_ID"), get("AZURE_CLIENT_ID")) else {
        anyhow::bail!(
            "and the environment has no AZURE_TENANT_ID and AZURE_CLIENT_ID: set them with \
             AZURE_CLIENT_SECRET (a service principal) or AZURE_FEDERATED_TOKEN_FILE (workload \
             identity), or give the three values in the provider"
        )
    };
    if let Some(secret) = get("AZURE_CLIENT_SECRET") {
        return Ok(AzureCredential::ClientSecret {
            tenant,
            client_id,
            secret,
        });
    }
    if let Some(token_file) = get("AZURE_FEDERATED_TOKEN_FILE") {
        return Ok(AzureCredential::FederatedToken {
            tenant,
            client_id,
            token_file,
        });
    }
    anyhow::bail!(
        "and the environment has neither AZURE_CLIENT_SECRET nor AZURE_FEDERATED_TOKEN_FILE \
         (managed identity through the instance metadata service is not supported)"
    )
}

/// The `value` field of a KV v2 read answer (`{"data": {"data": {"value": ..}}}`).
fn vault_value(body: &[u8]) -> anyhow::Result<String> {
    let v: serde_json::Value = serde_json::from_slice(body).context("the answer is not JSON")?;
    v.pointer("/data/data/value")
        .and_then(|v| v.as_str())
        .map(str::to_owned)
        .context("it has no string field `value` (store the variable's value under `value`)")
}

/// An error answer's text, cut and escaped for a message.
fn answer_text(body: &[u8]) -> String {
    spin_app_format::untrusted::shown(body).to_string()
}

/// Sends a GET request and reads the answer.
fn send(req: ureq::RequestBuilder<ureq::typestate::WithoutBody>) -> anyhow::Result<(u16, Vec<u8>)> {
    read_answer(req.call()?)
}

fn read_answer(mut r: ureq::http::Response<ureq::Body>) -> anyhow::Result<(u16, Vec<u8>)> {
    let status = r.status().as_u16();
    let body = r
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER_BYTES)
        .read_to_vec()?;
    Ok((status, body))
}

/// The client: [`super::tls::http_agent`] with [`REQUEST_TIMEOUT`].
fn agent() -> ureq::Agent {
    super::tls::http_agent(REQUEST_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_vault_scopes_follow_the_cloud() {
        assert_eq!(
            key_vault_scope("https://x.vault.azure.net"),
            "https://vault.azure.net/.default"
        );
        assert_eq!(
            key_vault_scope("https://x.vault.azure.cn/"),
            "https://vault.azure.cn/.default"
        );
        assert_eq!(
            key_vault_scope("https://127.0.0.1:8443"),
            "https://vault.azure.net/.default"
        );
    }

    #[test]
    fn vault_values_come_from_the_value_field() {
        let ok = br#"{"data":{"data":{"value":"s3cret"},"metadata":{"version":1}}}"#;
        assert_eq!(vault_value(ok).unwrap(), "s3cret");
        let e = vault_value(br#"{"data":{"data":{"token":"x"}}}"#).unwrap_err();
        assert!(format!("{e:#}").contains("`value`"), "{e:#}");
    }
}
