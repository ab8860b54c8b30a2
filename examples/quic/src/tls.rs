//! TLS for the example: the server's self-signed certificate for `localhost` (made at start with
//! rcgen), and a client that accepts any certificate (this client only talks to its own test
//! servers on loopback; never do this against a real server).
use std::sync::Arc;

use rustls::{
    DigitallySignedStruct, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime},
};

/// HTTP/3's ALPN.
const ALPN: &[u8] = b"h3";

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's QUIC configuration: a new self-signed certificate, TLS 1.3, ALPN h3.
pub fn server_config() -> anyhow::Result<quinn::ServerConfig> {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()])?;
    let cert = CertificateDer::from(certified.cert);
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)?;
    Ok(quinn::ServerConfig::with_crypto(Arc::new(quic)))
}

/// The client's QUIC configuration: any server certificate accepted (see the module's note).
/// With `hello_bytes` above 0, the ClientHello offers made-up protocols after `h3` until its
/// ALPN list holds that many bytes, so that it spans several Initial datagrams (as a
/// ClientHello with post-quantum key shares or many extensions does), sent one by one (no
/// segmentation offload); the server picks `h3`.
pub fn client_config(hello_bytes: usize) -> anyhow::Result<quinn::ClientConfig> {
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let mut listed = ALPN.len() + 1;
    while listed < hello_bytes {
        let filler = format!("x-ck-padding-{:04}", tls.alpn_protocols.len()).into_bytes();
        listed += filler.len() + 1;
        tls.alpn_protocols.push(filler);
    }
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    if hello_bytes > 0 {
        // Each datagram on its own, as on a network: over loopback a GSO train reaches the
        // server's group as one datagram, which one run of ck's program routes whole.
        let mut transport = quinn::TransportConfig::default();
        transport.enable_segmentation_offload(false);
        config.transport_config(Arc::new(transport));
    }
    Ok(config)
}

/// Accepts any certificate; checks the handshake's signatures with it all the same.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
