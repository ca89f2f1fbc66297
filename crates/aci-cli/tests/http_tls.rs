//! `aci serve --http` over TLS, with certificates made in the test (rcgen,
//! the Redis TLS tests' PKI): the rmcp client over HTTPS, certificates
//! re-read when their files change without dropping open connections,
//! required client certificates, and the settings refused at start.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use store_redis::testing::TestPki;
use support::HANG_GUARD;
use support::command::{aci_async, stderr};
use support::contract::{call, ids};
use support::files::{config_file, temp_dir, unique};
use support::http::replica::Replica;
use support::http::sha256_hex;

const TOKEN: &str = "token-of-tls-bot-0b7c";

/// The server's files in `dir`, from `pki`.
fn write_server_files(dir: &Path, pki: &TestPki) -> (PathBuf, PathBuf) {
    let cert = dir.join("server.crt");
    let key = dir.join("server.key");
    replace(&cert, pki.server_cert_pem());
    replace(&key, pki.server_key_pem());
    (cert, key)
}

/// Writes `path` whole at once (a temporary file renamed over it), as a
/// certificate manager does.
fn replace(path: &Path, contents: &str) {
    let temporary = path.with_extension("new");
    std::fs::write(&temporary, contents).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

fn config(cert: &Path, key: &Path, client_ca: Option<&Path>) -> PathBuf {
    let client_ca = client_ca
        .map(|ca| format!("tls_client_ca_file = \"{}\"\n", ca.display()))
        .unwrap_or_default();
    config_file(
        "tls",
        &format!(
            "[serve]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n{client_ca}\n[auth.tokens.tls-bot]\nsha256 = \"{}\"\n",
            cert.display(),
            key.display(),
            sha256_hex(TOKEN)
        ),
    )
}

/// An HTTP client trusting only `cas`, presenting `identity` (PEM
/// certificate and key) if given.
fn https_client(cas: &[&TestPki], identity: Option<&TestPki>) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let roots = cas
        .iter()
        .map(|pki| reqwest::Certificate::from_pem(pki.ca_cert_pem().as_bytes()).unwrap());
    let mut builder = reqwest::Client::builder().tls_certs_only(roots);
    if let Some(pki) = identity {
        let pem = format!("{}{}", pki.client_cert_pem(), pki.client_key_pem());
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    builder.build().unwrap()
}

fn certificate(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

/// A TLS connection to `addr` trusting `cas`; the server's leaf
/// certificate and the connection.
async fn connect(
    addr: &str,
    cas: &[&TestPki],
) -> std::io::Result<(
    CertificateDer<'static>,
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
)> {
    let mut roots = rustls::RootCertStore::empty();
    for pki in cas {
        roots.add(certificate(pki.ca_cert_pem())).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    let leaf = stream.get_ref().1.peer_certificates().unwrap()[0].clone();
    Ok((leaf, stream))
}

/// `GET /healthz` on an open HTTP/1 connection: the status.
async fn healthz(sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>) -> u16 {
    sender.ready().await.unwrap();
    let request = hyper::Request::get("/healthz")
        .header("host", "127.0.0.1")
        .body(Empty::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let _ = response.into_body().collect().await.unwrap();
    status
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rmcp_client_calls_over_https_and_nothing_is_served_in_clear() {
    let pki = TestPki::generate().unwrap();
    let dir = temp_dir("tls");
    let (cert, key) = write_server_files(&dir, &pki);
    let replica = Replica::start(&config(&cert, &key, None), "memory", &[]).await;
    assert!(replica.url("/mcp").starts_with("https://"));

    let client = replica
        .client_with("/mcp", Some(TOKEN), https_client(&[&pki], None))
        .await;
    let run = unique("run");
    let found = call(
        &client,
        "lookup_knowledge",
        json!({"query": "connection pool exhausted"}),
        ids(&run, "call_tls1"),
    )
    .await;
    assert_eq!(found["evidence_status"], "EVIDENCE_FOUND");
    client.cancel().await.unwrap();

    // A client that does not trust the CA gets no answer.
    let stranger = TestPki::generate().unwrap();
    let refused = https_client(&[&stranger], None)
        .get(replica.url("/healthz"))
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");
    // Nor does a request in clear.
    let clear = support::http::http_client()
        .get(format!("http://{}/healthz", replica.addr))
        .send()
        .await;
    assert!(
        clear.as_ref().map_or(true, |r| r.status() != 200),
        "{clear:?}"
    );
    // The server offers TLS 1.3 and ALPN http/1.1.
    let (_, stream) = connect(&replica.addr, &[&pki]).await.unwrap();
    let session = stream.get_ref().1;
    assert_eq!(
        session.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    assert_eq!(session.alpn_protocol(), Some(&b"http/1.1"[..]));

    let (status, stderr) = replica.stop().await;
    assert!(status.success(), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replaced_certificate_is_served_to_new_connections_and_open_ones_stay() {
    let first = TestPki::generate().unwrap();
    let second = TestPki::generate().unwrap();
    let dir = temp_dir("tls-reload");
    let (cert, key) = write_server_files(&dir, &first);
    let replica = Replica::start(&config(&cert, &key, None), "memory", &[]).await;

    // A connection opened under the first certificate.
    let (leaf, stream) = connect(&replica.addr, &[&first, &second]).await.unwrap();
    assert_eq!(leaf, certificate(first.server_cert_pem()));
    let (mut open, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    assert_eq!(healthz(&mut open).await, 200);

    // The files change: new connections get the second certificate.
    write_server_files(&dir, &second);
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let (leaf, _) = connect(&replica.addr, &[&first, &second]).await.unwrap();
        if leaf == certificate(second.server_cert_pem()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The connection opened before is still served.
    assert_eq!(healthz(&mut open).await, 200);

    // A broken key is refused; the second certificate stays.
    replace(
        &key,
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    );
    let deadline = Instant::now() + HANG_GUARD;
    while !replica.stderr().contains("TLS certificate not reloaded") {
        assert!(Instant::now() < deadline, "{}", replica.stderr());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (leaf, _) = connect(&replica.addr, &[&first, &second]).await.unwrap();
    assert_eq!(leaf, certificate(second.server_cert_pem()));
    assert_eq!(healthz(&mut open).await, 200);

    let (status, stderr) = replica.stop().await;
    assert!(status.success(), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn client_certificates_from_the_configured_ca_are_required() {
    let pki = TestPki::generate().unwrap();
    let dir = temp_dir("tls-mutual");
    let (cert, key) = write_server_files(&dir, &pki);
    let ca = dir.join("clients.crt");
    std::fs::write(&ca, pki.ca_cert_pem()).unwrap();
    let replica = Replica::start(&config(&cert, &key, Some(&ca)), "memory", &[]).await;

    let client = replica
        .client_with("/mcp", Some(TOKEN), https_client(&[&pki], Some(&pki)))
        .await;
    let found = call(
        &client,
        "lookup_knowledge",
        json!({"query": "connection pool exhausted"}),
        ids(&unique("run"), "call_mtls1"),
    )
    .await;
    assert_eq!(found["evidence_status"], "EVIDENCE_FOUND");
    client.cancel().await.unwrap();

    // No client certificate, or one from another CA: no answer.
    let stranger = TestPki::generate().unwrap();
    for identity in [None, Some(&stranger)] {
        let refused = https_client(&[&pki], identity)
            .get(replica.url("/healthz"))
            .send()
            .await;
        assert!(refused.is_err(), "{refused:?}");
    }
    let (status, stderr) = replica.stop().await;
    assert!(status.success(), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn weak_or_inconsistent_tls_settings_are_refused_at_start() {
    let pki = TestPki::generate().unwrap();
    let other = TestPki::generate().unwrap();
    let dir = temp_dir("tls-refused");
    let (cert, key) = write_server_files(&dir, &pki);
    let other_key = dir.join("other.key");
    std::fs::write(&other_key, other.server_key_pem()).unwrap();
    let empty = dir.join("empty.crt");
    std::fs::write(&empty, "").unwrap();
    let token = format!(
        "[auth.tokens.tls-bot]\nsha256 = \"{}\"\n",
        sha256_hex(TOKEN)
    );
    let cases = [
        (
            format!("[serve]\ntls_cert_file = \"{}\"\n", cert.display()),
            "tls_cert_file and tls_key_file go together",
        ),
        (
            format!("[serve]\ntls_client_ca_file = \"{}\"\n", cert.display()),
            "tls_client_ca_file needs tls_cert_file and tls_key_file",
        ),
        (
            format!(
                "[serve]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
                cert.display(),
                other_key.display()
            ),
            "does not match the certificate",
        ),
        (
            format!(
                "[serve]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
                empty.display(),
                key.display()
            ),
            "no PEM certificate in it",
        ),
        (
            format!(
                "[serve]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\ntls_client_ca_file = \"{}\"\n",
                cert.display(),
                key.display(),
                empty.display()
            ),
            "tls_client_ca_file",
        ),
    ];
    for (serve, message) in cases {
        let file = config_file("tls-refused", &format!("{serve}\n{token}"));
        let output = aci_async(&[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--config",
            file.to_str().unwrap(),
            "--store",
            "memory",
        ])
        .await;
        assert!(!output.status.success(), "{serve}");
        let stderr = stderr(&output);
        assert!(stderr.contains(message), "{serve}: {stderr}");
        assert!(!stderr.contains("PRIVATE KEY"), "{stderr}");
    }
}
