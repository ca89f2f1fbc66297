//! `rediss://`: TLS over rustls with the ring provider, no system OpenSSL.
//!
//! Without a configured CA the server certificate must chain to the
//! compiled-in Mozilla roots (`webpki-roots`); with one, it must chain to
//! that CA (and only to it). A client certificate and key enable mutual TLS.
//! The PEM material is checked when the store is built, kept in memory, and
//! never printed.

use std::fmt;
use std::sync::{Arc, Once};

use redis::{ClientTlsConfig, TlsCertificates};
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::error::ConfigProblem;

/// The certificates a `rediss://` connection uses besides the defaults.
#[derive(Clone)]
pub(crate) struct TlsSettings {
    /// PEM certificates to trust instead of the web PKI roots.
    pub(crate) root_ca_pem: Option<Arc<[u8]>>,
    /// The client certificate, for mutual TLS.
    pub(crate) client: Option<ClientIdentity>,
}

/// A client certificate chain and its private key, both PEM.
#[derive(Clone)]
pub(crate) struct ClientIdentity {
    pub(crate) cert_chain_pem: Arc<[u8]>,
    pub(crate) key_pem: Arc<[u8]>,
}

impl TlsSettings {
    /// Whether anything beyond the defaults is configured.
    pub(crate) const fn is_configured(&self) -> bool {
        self.root_ca_pem.is_some() || self.client.is_some()
    }

    /// Parses everything the way the connection will, without printing any
    /// of it.
    pub(crate) fn validate(&self) -> Result<(), ConfigProblem> {
        if let Some(pem) = &self.root_ca_pem {
            root_store(pem).ok_or(ConfigProblem::InvalidTlsRootCa)?;
        }
        if let Some(client) = &self.client {
            let chain =
                certificates(&client.cert_chain_pem).ok_or(ConfigProblem::InvalidTlsClientCert)?;
            let key = PrivateKeyDer::from_pem_slice(&client.key_pem)
                .map_err(|_| ConfigProblem::InvalidTlsClientKey)?;
            CertifiedKey::from_der(chain, key, &rustls::crypto::ring::default_provider())
                .map_err(|_| ConfigProblem::InvalidTlsClientKey)?;
        }
        Ok(())
    }

    /// The certificates for `redis::Client::build_with_tls` and
    /// `ClusterClientBuilder::certs`, or `None` for the defaults.
    pub(crate) fn certificates(&self) -> Option<TlsCertificates> {
        if !self.is_configured() {
            return None;
        }
        Some(TlsCertificates {
            client_tls: self.client.as_ref().map(|client| ClientTlsConfig {
                client_cert: client.cert_chain_pem.to_vec(),
                client_key: client.key_pem.to_vec(),
            }),
            root_cert: self.root_ca_pem.as_ref().map(|pem| pem.to_vec()),
        })
    }
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |present: bool| if present { "<set>" } else { "<unset>" };
        f.debug_struct("TlsSettings")
            .field("root_ca", &set(self.root_ca_pem.is_some()))
            .field("client_cert", &set(self.client.is_some()))
            .finish()
    }
}

/// The certificates of a PEM bundle: at least one, and nothing unparsable.
fn certificates(pem: &[u8]) -> Option<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    (!certs.is_empty()).then_some(certs)
}

/// A root store of every certificate in `pem`, each a valid trust anchor.
fn root_store(pem: &[u8]) -> Option<RootCertStore> {
    let mut store = RootCertStore::empty();
    for cert in certificates(pem)? {
        store.add(cert).ok()?;
    }
    Some(store)
}

/// Makes rustls's ring provider the process default unless a default is
/// already installed.
///
/// redis builds each connection's `rustls::ClientConfig` with the process
/// default provider, which rustls can pick by itself only when exactly one
/// of its providers is compiled in; installing ring (the provider this
/// workspace builds) keeps a second one, pulled in by another dependency,
/// from turning every `rediss://` connect into a panic. A default installed
/// by the application first is kept.
pub(crate) fn ensure_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        if CryptoProvider::get_default().is_none() {
            // Losing a race to another installer is fine: a default exists.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}
