//! Certificate generation: a throwaway CA with a server and a client
//! certificate, made in-process with `rcgen`, the files a TLS server reads,
//! and the certificates a driver client trusts and presents.

use std::path::Path;
use std::sync::OnceLock;

use super::{Outcome, TestSupportError};

/// The CA certificate a TLS server's temp dir holds.
pub(super) const CA_CERT_FILE: &str = "ca.crt";
/// The server certificate a TLS server's temp dir holds.
pub(super) const SERVER_CERT_FILE: &str = "server.crt";
/// The server key a TLS server's temp dir holds.
pub(super) const SERVER_KEY_FILE: &str = "server.key";

/// A throwaway certificate authority, a server certificate it issued for
/// `127.0.0.1` and `localhost`, and a client certificate it issued: ECDSA
/// P-256, made in-process with `rcgen`.
///
/// Debug shows no PEM.
pub struct TestPki {
    ca_cert_pem: String,
    server_cert_pem: String,
    server_key_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki").finish_non_exhaustive()
    }
}

impl TestPki {
    /// A new, unrelated PKI (e.g. to show that its certificates are not
    /// trusted by a server or client of [`shared`](Self::shared)).
    ///
    /// # Errors
    /// When rcgen fails.
    pub fn generate() -> Outcome<Self> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let fail = |e: rcgen::Error| TestSupportError::new(format!("test PKI: {e}"));
        let ca_key = KeyPair::generate().map_err(fail)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(
            DnType::CommonName,
            format!("aci test CA {:08x}", fastrand::u32(..)),
        );
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).map_err(fail)?;
        let issuer = Issuer::new(ca, ca_key);

        // The server certificate doubles as a cluster node's client
        // certificate on the TLS cluster bus.
        let server_key = KeyPair::generate().map_err(fail)?;
        let mut server =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(fail)?;
        server
            .distinguished_name
            .push(DnType::CommonName, "aci test redis-server");
        server.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let server_cert = server.signed_by(&server_key, &issuer).map_err(fail)?;

        let client_key = KeyPair::generate().map_err(fail)?;
        let mut client = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
        client
            .distinguished_name
            .push(DnType::CommonName, "aci test client");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client.signed_by(&client_key, &issuer).map_err(fail)?;

        Ok(Self {
            ca_cert_pem: ca_cert.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        })
    }

    /// The PKI of this test process: every TLS server spawned here uses its
    /// server certificate.
    ///
    /// # Errors
    /// When it could not be made.
    pub fn shared() -> Outcome<&'static Self> {
        static SHARED: OnceLock<Result<TestPki, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| Self::generate().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|why| TestSupportError::new(why.clone()))
    }

    /// The CA certificate, PEM.
    #[must_use]
    pub fn ca_cert_pem(&self) -> &str {
        &self.ca_cert_pem
    }

    /// The server certificate (SAN `127.0.0.1`, `localhost`), PEM.
    #[must_use]
    pub fn server_cert_pem(&self) -> &str {
        &self.server_cert_pem
    }

    /// The server's private key, PKCS#8 PEM.
    #[must_use]
    pub fn server_key_pem(&self) -> &str {
        &self.server_key_pem
    }

    /// The client certificate, PEM.
    #[must_use]
    pub fn client_cert_pem(&self) -> &str {
        &self.client_cert_pem
    }

    /// The client's private key, PKCS#8 PEM.
    #[must_use]
    pub fn client_key_pem(&self) -> &str {
        &self.client_key_pem
    }

    pub(super) fn write_server_files(&self, dir: &Path) -> Outcome<()> {
        for (name, pem) in [
            (CA_CERT_FILE, &self.ca_cert_pem),
            (SERVER_CERT_FILE, &self.server_cert_pem),
            (SERVER_KEY_FILE, &self.server_key_pem),
        ] {
            std::fs::write(dir.join(name), pem)
                .map_err(|e| TestSupportError::new(format!("writing {name}: {e}")))?;
        }
        Ok(())
    }

    /// The CA as root and the client certificate, for a redis client.
    pub(super) fn client_certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: self.client_cert_pem.clone().into_bytes(),
                client_key: self.client_key_pem.clone().into_bytes(),
            }),
            root_cert: Some(self.ca_cert_pem.clone().into_bytes()),
        }
    }
}
