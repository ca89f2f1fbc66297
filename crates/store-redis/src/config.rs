//! Configuration of the Redis store: where Redis is, pool size, key prefix,
//! timeouts, TLS certificates; the store URL parser and the `[redis]`
//! settings of a configuration file.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::{ConnectionAddr, IntoConnectionInfo};
use serde::Deserialize;

use crate::error::{ConfigProblem, RedisStoreError};
use crate::tls::{ClientIdentity, TlsSettings};

/// Default [`RedisConfig::pool_size`].
pub const DEFAULT_POOL_SIZE: usize = 4;
/// Default [`RedisConfig::key_prefix`].
pub const DEFAULT_KEY_PREFIX: &str = "aci";
/// Default [`RedisConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Default [`RedisConfig::operation_timeout`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest accepted key prefix, in bytes.
pub const MAX_KEY_PREFIX_BYTES: usize = 64;

/// Where Redis is and how to use it.
///
/// `redis://` connects in plain text, `rediss://` over TLS (rustls). A
/// `rediss://` server's certificate must chain to the Mozilla root
/// certificates compiled into the binary (`webpki-roots`, as public managed
/// Redis services use) or, when [`tls_root_ca_pem`](Self::tls_root_ca_pem)
/// is set, to that CA instead; its name or IP address must match the URL's
/// host. Certificate verification cannot be turned off.
///
/// Debug never shows the URLs (they may carry a password) nor any
/// certificate or key.
#[derive(Clone)]
pub struct RedisConfig {
    pub(crate) nodes: Nodes,
    pub(crate) pool_size: usize,
    pub(crate) key_prefix: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) operation_timeout: Duration,
    pub(crate) tls: TlsSettings,
    pub(crate) outbox: bool,
}

#[derive(Clone)]
pub(crate) enum Nodes {
    Single(String),
    Cluster(Vec<String>),
}

impl RedisConfig {
    /// A single Redis server (or a primary behind a proxy/failover address):
    /// `redis://[user:password@]host[:port][/db]`, or `rediss://…` for TLS.
    pub fn single(url: impl Into<String>) -> Self {
        Self::with_nodes(Nodes::Single(url.into()))
    }

    /// A Redis Cluster, reached through any of `node_urls` (the client
    /// discovers the rest). Every URL uses the same scheme; with `rediss://`
    /// every node, discovered ones included, is reached over TLS with the
    /// same certificates.
    pub fn cluster<I, S>(node_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_nodes(Nodes::Cluster(
            node_urls.into_iter().map(Into::into).collect(),
        ))
    }

    /// Parses a store URL: `redis://…` or `rediss://…` is [`single`](Self::single);
    /// `redis+cluster://[user:password@]host:port,host:port[/db]` (or
    /// `rediss+cluster://…` for TLS) is a [`cluster`](Self::cluster) whose
    /// seed nodes each get the credentials, as
    /// `redis://[user:password@]host:port`.
    ///
    /// Only the scheme and the node list are checked here; the rest is
    /// checked by [`RedisStore::new`](crate::RedisStore::new).
    ///
    /// # Errors
    /// [`ConfigProblem::UnrecognizedStoreUrl`] for any other scheme,
    /// [`ConfigProblem::NoClusterNodes`] for a cluster URL without a node.
    /// Neither echoes the URL.
    pub fn from_url(url: &str) -> Result<Self, RedisStoreError> {
        for (prefix, scheme) in [
            ("redis+cluster://", "redis"),
            ("rediss+cluster://", "rediss"),
        ] {
            let Some(nodes) = url.strip_prefix(prefix) else {
                continue;
            };
            // `user:password@` applies to every node; the last `@` ends it,
            // so a password may hold one.
            let (auth, hosts) = match nodes.rsplit_once('@') {
                Some((auth, hosts)) => (format!("{auth}@"), hosts),
                None => (String::new(), nodes),
            };
            let nodes: Vec<String> = hosts
                .split(',')
                .filter(|n| !n.is_empty())
                .map(|n| format!("{scheme}://{auth}{n}"))
                .collect();
            if nodes.is_empty() {
                return Err(RedisStoreError::Config(ConfigProblem::NoClusterNodes));
            }
            return Ok(Self::cluster(nodes));
        }
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            return Ok(Self::single(url));
        }
        Err(RedisStoreError::Config(ConfigProblem::UnrecognizedStoreUrl))
    }

    const fn with_nodes(nodes: Nodes) -> Self {
        Self {
            nodes,
            pool_size: DEFAULT_POOL_SIZE,
            key_prefix: String::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            tls: TlsSettings {
                root_ca_pem: None,
                client: None,
            },
            outbox: false,
        }
    }

    /// Whether every finalization also appends the record's key to the
    /// outbox for archivers (`RedisStore::outbox`), in the same script.
    /// Default off: an outbox nobody reads grows without end. Every replica
    /// of a deployment that archives must turn it on.
    #[must_use]
    pub const fn outbox(mut self, enabled: bool) -> Self {
        self.outbox = enabled;
        self
    }

    /// How many multiplexed connections the store opens and shares (round
    /// robin) among the operations of each tokio runtime that uses it
    /// (connections belong to the runtime that opened them). Default 4.
    #[must_use]
    pub const fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// The first segment of every key (default `aci`): 1 to 64 bytes of
    /// `[A-Za-z0-9_.:-]`. Lets several deployments share one Redis.
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Longest time to open one connection. Default 1 s.
    #[must_use]
    pub const fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Longest time one store operation may take, waiting for a pooled
    /// connection and connecting included; past it the operation fails as
    /// `STORE_UNAVAILABLE`. Default 2 s.
    #[must_use]
    pub const fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Trusts the CA certificate(s) in `pem` (one or more PEM `CERTIFICATE`
    /// blocks, e.g. the contents of a `ca.crt`) for `rediss://` instead of
    /// the compiled-in web PKI roots: a private CA, or the CA of a managed
    /// service that does not use a public one.
    ///
    /// Needs `rediss://` URLs; the PEM is checked by [`RedisStore::new`]
    /// (`InvalidTlsRootCa`).
    ///
    /// [`RedisStore::new`]: crate::RedisStore::new
    #[must_use]
    pub fn tls_root_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root_ca_pem = Some(pem.into().into());
        self
    }

    /// Presents this client certificate for mutual TLS (servers with
    /// `tls-auth-clients yes`): `cert_chain_pem` holds the client certificate
    /// first, then any intermediates; `key_pem` its private key (PKCS#8,
    /// PKCS#1 or SEC1 PEM).
    ///
    /// Needs `rediss://` URLs; both are checked by [`RedisStore::new`]
    /// (`InvalidTlsClientCert`, `InvalidTlsClientKey`, including a key that
    /// does not belong to the certificate). The key is never printed.
    ///
    /// [`RedisStore::new`]: crate::RedisStore::new
    #[must_use]
    pub fn tls_client_cert_pem(
        mut self,
        cert_chain_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some(ClientIdentity {
            cert_chain_pem: cert_chain_pem.into().into(),
            key_pem: key_pem.into().into(),
        });
        self
    }

    /// Whether the URLs use `rediss://` (TLS). Says nothing about validity.
    #[must_use]
    pub fn uses_tls(&self) -> bool {
        self.urls()
            .first()
            .is_some_and(|url| url.starts_with("rediss://"))
    }

    fn urls(&self) -> &[String] {
        match &self.nodes {
            Nodes::Single(url) => std::slice::from_ref(url),
            Nodes::Cluster(urls) => urls,
        }
    }

    /// Whether this is a cluster configuration.
    #[must_use]
    pub const fn is_cluster(&self) -> bool {
        matches!(self.nodes, Nodes::Cluster(_))
    }

    /// The key prefix in effect.
    #[must_use]
    pub fn effective_key_prefix(&self) -> &str {
        if self.key_prefix.is_empty() {
            DEFAULT_KEY_PREFIX
        } else {
            &self.key_prefix
        }
    }

    /// Checks everything that can be checked without connecting.
    pub(crate) fn validate(&self) -> Result<(), RedisStoreError> {
        let problem = |p| Err(RedisStoreError::Config(p));
        if self.pool_size == 0 {
            return problem(ConfigProblem::ZeroPoolSize);
        }
        if self.connect_timeout.is_zero() || self.operation_timeout.is_zero() {
            return problem(ConfigProblem::ZeroTimeout);
        }
        let prefix = self.effective_key_prefix();
        if prefix.len() > MAX_KEY_PREFIX_BYTES || !prefix.bytes().all(aci_contracts::is_id_byte) {
            return problem(ConfigProblem::InvalidKeyPrefix);
        }
        let urls = self.urls();
        if urls.is_empty() || urls.iter().any(|u| u.trim().is_empty()) {
            return problem(ConfigProblem::MissingUrl);
        }
        let mut tls = None;
        for url in urls {
            let this_tls = if url.starts_with("rediss://") {
                true
            } else if url.starts_with("redis://") {
                false
            } else {
                return problem(ConfigProblem::UnsupportedScheme);
            };
            if tls.is_some_and(|t| t != this_tls) {
                return problem(ConfigProblem::MixedSchemes);
            }
            tls = Some(this_tls);
            let Ok(info) = url.as_str().into_connection_info() else {
                return problem(ConfigProblem::MalformedUrl);
            };
            if matches!(info.addr(), ConnectionAddr::TcpTls { insecure: true, .. }) {
                return problem(ConfigProblem::InsecureTls);
            }
        }
        if self.tls.is_configured() && tls != Some(true) {
            return problem(ConfigProblem::TlsWithoutRediss);
        }
        self.tls.validate().map_err(RedisStoreError::Config)
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mode, nodes) = match &self.nodes {
            Nodes::Single(_) => ("single", 1),
            Nodes::Cluster(urls) => ("cluster", urls.len()),
        };
        f.debug_struct("RedisConfig")
            .field("mode", &mode)
            .field("nodes", &nodes)
            .field("urls", &"<redacted>")
            .field("pool_size", &self.pool_size)
            .field("key_prefix", &self.effective_key_prefix())
            .field("connect_timeout", &self.connect_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .field("outbox", &self.outbox)
            .field("tls", &self.uses_tls())
            .field("tls_root_ca", &redacted(self.tls.root_ca_pem.is_some()))
            .field("tls_client_cert", &redacted(self.tls.client.is_some()))
            .finish()
    }
}

const fn redacted(present: bool) -> &'static str {
    if present { "<redacted>" } else { "<unset>" }
}

/// The `[redis]` section of a configuration file: everything about the store
/// but its URL. Every key is optional (the [`RedisConfig`] defaults apply);
/// unknown keys are refused. The README's Configuration section shows every
/// key.
///
/// The TLS keys name PEM files, read by [`apply`](Self::apply).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSettings {
    /// [`RedisConfig::key_prefix`].
    pub key_prefix: Option<String>,
    /// [`RedisConfig::pool_size`].
    pub pool_size: Option<usize>,
    /// [`RedisConfig::operation_timeout`], in milliseconds.
    pub timeout_ms: Option<u64>,
    /// A PEM CA bundle for [`RedisConfig::tls_root_ca_pem`].
    pub tls_ca_file: Option<PathBuf>,
    /// A PEM certificate chain for [`RedisConfig::tls_client_cert_pem`];
    /// needs `tls_client_key_file`.
    pub tls_client_cert_file: Option<PathBuf>,
    /// The PEM private key of `tls_client_cert_file`.
    pub tls_client_key_file: Option<PathBuf>,
}

impl RedisSettings {
    /// The store at `url` ([`RedisConfig::from_url`]) with these settings.
    ///
    /// # Errors
    /// As [`RedisConfig::from_url`] and [`apply`](Self::apply).
    pub fn config_for(&self, url: &str) -> Result<RedisConfig, RedisStoreError> {
        self.apply(RedisConfig::from_url(url)?)
    }

    /// `config` with the settings that are present applied, the TLS files
    /// read. The values themselves are checked by
    /// [`RedisStore::new`](crate::RedisStore::new).
    ///
    /// # Errors
    /// [`RedisStoreError::UnreadableFile`] (naming the key and the path,
    /// never the contents) when a file cannot be read;
    /// [`ConfigProblem::UnpairedTlsClientFiles`] when only one of the client
    /// certificate and key is set.
    pub fn apply(&self, mut config: RedisConfig) -> Result<RedisConfig, RedisStoreError> {
        if let Some(prefix) = &self.key_prefix {
            config = config.key_prefix(prefix.clone());
        }
        if let Some(size) = self.pool_size {
            config = config.pool_size(size);
        }
        if let Some(ms) = self.timeout_ms {
            config = config.operation_timeout(Duration::from_millis(ms));
        }
        if let Some(path) = &self.tls_ca_file {
            config = config.tls_root_ca_pem(read_file(path, "tls_ca_file")?);
        }
        match (&self.tls_client_cert_file, &self.tls_client_key_file) {
            (Some(cert), Some(key)) => {
                config = config.tls_client_cert_pem(
                    read_file(cert, "tls_client_cert_file")?,
                    read_file(key, "tls_client_key_file")?,
                );
            }
            (None, None) => {}
            _ => {
                return Err(RedisStoreError::Config(
                    ConfigProblem::UnpairedTlsClientFiles,
                ));
            }
        }
        Ok(config)
    }
}

fn read_file(path: &Path, key: &'static str) -> Result<Vec<u8>, RedisStoreError> {
    std::fs::read(path).map_err(|e| RedisStoreError::UnreadableFile {
        key,
        path: path.to_owned(),
        kind: e.kind(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(url: &str) -> (bool, Vec<String>) {
        let config = RedisConfig::from_url(url).unwrap();
        (config.is_cluster(), config.urls().to_vec())
    }

    #[test]
    fn store_urls() {
        assert_eq!(
            urls("rediss://h:6380/0"),
            (false, vec!["rediss://h:6380/0".to_owned()])
        );
        assert_eq!(
            urls("redis+cluster://a:7000,b:7001"),
            (
                true,
                vec!["redis://a:7000".to_owned(), "redis://b:7001".to_owned()]
            )
        );
        assert_eq!(
            urls("rediss+cluster://:pw@a:7000,b:7001"),
            (
                true,
                vec![
                    "rediss://:pw@a:7000".to_owned(),
                    "rediss://:pw@b:7001".to_owned()
                ]
            )
        );
        assert_eq!(
            urls("redis+cluster://u:p@ss@a:7000,,b:7001/0"),
            (
                true,
                vec![
                    "redis://u:p@ss@a:7000".to_owned(),
                    "redis://u:p@ss@b:7001/0".to_owned()
                ]
            )
        );
        for bad in [
            "",
            "mem",
            "memory",
            "http://h",
            "redis+cluster://",
            "redis+cluster://pw@",
        ] {
            let err = RedisConfig::from_url(bad).unwrap_err().to_string();
            assert!(!err.contains("pw"), "{err}");
        }
        assert_eq!(
            RedisConfig::from_url("redis+cluster://pw@").unwrap_err(),
            RedisStoreError::Config(ConfigProblem::NoClusterNodes)
        );
        assert_eq!(
            RedisConfig::from_url("http://h").unwrap_err(),
            RedisStoreError::Config(ConfigProblem::UnrecognizedStoreUrl)
        );
    }

    #[test]
    fn a_password_in_a_bad_url_never_reaches_the_error() {
        for bad in [
            "http://user:s3cr3t@example.invalid",
            "redis+cluster://user:s3cr3t@",
            "rediss+cluster://:s3cr3t@,,",
            "s3cr3t",
        ] {
            let err = RedisConfig::from_url(bad).unwrap_err();
            for text in [err.to_string(), format!("{err:?}")] {
                assert!(!text.contains("s3cr3t"), "{bad}: {text}");
                assert!(!text.contains("example.invalid"), "{bad}: {text}");
            }
            assert_eq!(err.code(), "REDIS_CONFIG_INVALID");
        }
        let ok = RedisConfig::from_url("rediss+cluster://user:s3cr3t@a:1,b:2").unwrap();
        assert!(!format!("{ok:?}").contains("s3cr3t"));
    }

    fn settings(json: serde_json::Value) -> Result<RedisSettings, serde_json::Error> {
        serde_json::from_value(json)
    }

    #[test]
    fn settings_apply_over_the_defaults() {
        let config = settings(serde_json::json!({}))
            .unwrap()
            .config_for("redis://h:1/0")
            .unwrap();
        assert_eq!(config.pool_size, DEFAULT_POOL_SIZE);
        assert_eq!(config.effective_key_prefix(), DEFAULT_KEY_PREFIX);
        assert_eq!(config.operation_timeout, DEFAULT_OPERATION_TIMEOUT);
        assert!(!config.tls.is_configured());

        let config = settings(serde_json::json!({
            "key_prefix": "blue",
            "pool_size": 7,
            "timeout_ms": 1500,
        }))
        .unwrap()
        .config_for("redis+cluster://a:1,b:2")
        .unwrap();
        assert!(config.is_cluster());
        assert_eq!(config.pool_size, 7);
        assert_eq!(config.effective_key_prefix(), "blue");
        assert_eq!(config.operation_timeout, Duration::from_millis(1500));
    }

    #[test]
    fn unknown_settings_are_refused() {
        for key in ["prefix", "url", "operation_timeout", "tls_ca"] {
            let err = settings(serde_json::json!({ key: "x" })).unwrap_err();
            assert!(err.to_string().contains("unknown field"), "{key}: {err}");
        }
    }

    #[test]
    fn tls_files_are_read_and_errors_name_key_and_path_only() {
        let dir = std::env::temp_dir().join(format!(
            "store-redis-settings-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        let cert = dir.join("client.pem");
        let key = dir.join("client.key");
        std::fs::write(&ca, "CA-CONTENTS").unwrap();
        std::fs::write(&cert, "CERT-CONTENTS").unwrap();
        std::fs::write(&key, "KEY-CONTENTS").unwrap();
        let all = RedisSettings {
            tls_ca_file: Some(ca.clone()),
            tls_client_cert_file: Some(cert.clone()),
            tls_client_key_file: Some(key.clone()),
            ..RedisSettings::default()
        };
        let config = all.config_for("rediss://h:1").unwrap();
        assert_eq!(
            config.tls.root_ca_pem.as_deref().map(<[u8]>::to_vec),
            Some(b"CA-CONTENTS".to_vec())
        );
        let client = config.tls.client.as_ref().unwrap();
        assert_eq!(&client.cert_chain_pem[..], b"CERT-CONTENTS");
        assert_eq!(&client.key_pem[..], b"KEY-CONTENTS");

        let missing = dir.join("missing.pem");
        for (key_name, settings) in [
            (
                "tls_ca_file",
                RedisSettings {
                    tls_ca_file: Some(missing.clone()),
                    ..all.clone()
                },
            ),
            (
                "tls_client_cert_file",
                RedisSettings {
                    tls_client_cert_file: Some(missing.clone()),
                    ..all.clone()
                },
            ),
            (
                "tls_client_key_file",
                RedisSettings {
                    tls_client_key_file: Some(missing.clone()),
                    ..all.clone()
                },
            ),
        ] {
            let err = settings.config_for("rediss://:s3cr3t@h:1").unwrap_err();
            assert_eq!(
                err,
                RedisStoreError::UnreadableFile {
                    key: key_name,
                    path: missing.clone(),
                    kind: std::io::ErrorKind::NotFound,
                }
            );
            let text = err.to_string();
            assert!(text.contains(key_name), "{text}");
            assert!(text.contains("missing.pem"), "{text}");
            assert_eq!(err.code(), "REDIS_CONFIG_INVALID");
            for text in [text, format!("{err:?}")] {
                assert!(!text.contains("CONTENTS"), "{text}");
                assert!(!text.contains("s3cr3t"), "{text}");
            }
        }

        for half in [
            RedisSettings {
                tls_client_key_file: None,
                ..all.clone()
            },
            RedisSettings {
                tls_client_cert_file: None,
                ..all.clone()
            },
        ] {
            assert_eq!(
                half.config_for("rediss://h:1").unwrap_err(),
                RedisStoreError::Config(ConfigProblem::UnpairedTlsClientFiles)
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
