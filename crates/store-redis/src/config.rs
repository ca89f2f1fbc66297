//! Configuration of the Redis store: where Redis is, pool size, key prefix,
//! timeouts, TLS certificates.

use std::fmt;
use std::time::Duration;

use redis::{ConnectionAddr, IntoConnectionInfo};

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
        }
    }

    /// How many multiplexed connections the store opens and shares (round
    /// robin) among all its operations. Default 4.
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
            .field("tls", &self.uses_tls())
            .field("tls_root_ca", &redacted(self.tls.root_ca_pem.is_some()))
            .field("tls_client_cert", &redacted(self.tls.client.is_some()))
            .finish()
    }
}

const fn redacted(present: bool) -> &'static str {
    if present { "<redacted>" } else { "<unset>" }
}
