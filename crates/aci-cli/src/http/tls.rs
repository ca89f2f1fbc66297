//! HTTPS on the listener of `aci serve --http`: rustls (ring), with the
//! certificate and key re-read when their files change.
//!
//! `[serve] tls_cert_file` (the chain, leaf first) and `tls_key_file` (PKCS#8,
//! PKCS#1 or SEC1 PEM) turn it on; `tls_client_ca_file` also requires every
//! client to present a certificate issued by one of those CAs. Only what
//! rustls offers is served: TLS 1.3 and 1.2 with forward-secret AEAD suites,
//! ALPN `http/1.1`. At start, and at each reload, the files are checked:
//! a key that does not match the certificate, an RSA key under 2048 bits
//! (ring refuses it), an empty chain or CA file are errors; at start the
//! process does not serve, at a reload the previous configuration stays and
//! the error is logged.
//!
//! A reload changes what new connections are offered; connections already
//! established keep their session.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;

use super::config::TlsFiles;

/// How often the files are looked at for a change.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// The TLS configuration new connections get, replaced when the files
/// change.
#[derive(Debug)]
pub(crate) struct TlsSettings {
    files: TlsFiles,
    current: RwLock<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    config: Arc<ServerConfig>,
    /// What the files looked like when read.
    stamp: Vec<FileStamp>,
}

/// A file's identity and version, as `stat` tells them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt as _;
    // Follows symlinks: a mounted secret swaps the link's target.
    let metadata = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        modified: metadata.modified().ok(),
        len: metadata.len(),
        inode: metadata.ino(),
    })
}

impl TlsSettings {
    /// Reads and checks the files.
    ///
    /// # Errors
    /// A one-line reason naming the file.
    pub(crate) fn load(files: TlsFiles) -> Result<Arc<Self>, String> {
        let loaded = load(&files)?;
        Ok(Arc::new(Self {
            files,
            current: RwLock::new(loaded),
        }))
    }

    /// The configuration for a new connection.
    pub(crate) fn config(&self) -> Arc<ServerConfig> {
        Arc::clone(
            &self
                .current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .config,
        )
    }

    /// Whether clients must present a certificate.
    pub(crate) fn requires_client_certificates(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// Re-reads the files if they changed since last read: whether a new
    /// configuration is in force. A failed reload keeps the previous one
    /// (and is tried again at the next change).
    pub(crate) fn reload_if_changed(&self) -> Result<bool, String> {
        let now = self.files.paths().map(|p| stamp(p)).collect::<Vec<_>>();
        let stamp_now: Vec<FileStamp> = now.iter().flatten().cloned().collect();
        {
            let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
            if current.stamp == stamp_now {
                return Ok(false);
            }
        }
        let reloaded = load(&self.files);
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        match reloaded {
            Ok(loaded) => {
                *current = loaded;
                Ok(true)
            }
            Err(e) => {
                // Not tried again until the files change once more.
                current.stamp = stamp_now;
                Err(e)
            }
        }
    }

    /// Looks at the files every second for ever, reloading them when they
    /// change (a failure is logged; the previous configuration stays).
    pub(crate) async fn watch(self: Arc<Self>) {
        loop {
            tokio::time::sleep(RELOAD_CHECK).await;
            let settings = Arc::clone(&self);
            let outcome = tokio::task::spawn_blocking(move || settings.reload_if_changed()).await;
            match outcome {
                Ok(Ok(true)) => tracing::info!("TLS certificate reloaded"),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "TLS certificate not reloaded; the previous one stays");
                }
                Err(_) => {}
            }
        }
    }
}

impl TlsFiles {
    fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()]
            .into_iter()
            .flatten()
    }
}

/// Reads the files into a server configuration.
fn load(files: &TlsFiles) -> Result<Loaded, String> {
    // Stamped before reading: a change while reading is seen next time.
    let stamp = files.paths().filter_map(|p| stamp(p)).collect();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = read_certificates(&files.cert, "tls_cert_file")?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("tls_key_file {}: {e}", files.key.display()))?;
    let signing = provider.key_provider.load_private_key(key).map_err(|e| {
        format!(
            "tls_key_file {}: not a usable private key (RSA needs at least 2048 bits): {e}",
            files.key.display()
        )
    })?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        format!(
            "tls_key_file {} does not match the certificate of tls_cert_file {}: {e}",
            files.key.display(),
            files.cert.display()
        )
    })?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for certificate in read_certificates(path, "tls_client_ca_file")? {
                roots
                    .add(certificate)
                    .map_err(|e| format!("tls_client_ca_file {}: {e}", path.display()))?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                    .build()
                    .map_err(|e| format!("tls_client_ca_file {}: {e}", path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(SingleCertificate(Arc::new(certified))));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Loaded {
        config: Arc::new(config),
        stamp,
    })
}

/// The one certificate this server has, whatever the client asks for.
#[derive(Debug)]
struct SingleCertificate(Arc<CertifiedKey>);

impl ResolvesServerCert for SingleCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}

/// The certificates of a PEM file; at least one.
fn read_certificates(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{key} {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{key} {}: {e}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!(
            "{key} {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(certificates)
}
