//! TLS for the native protocol: rustls over the workers' non-blocking
//! sockets.
//!
//! rustls does no I/O of its own. Reading, ciphertext goes from the socket
//! into the session and plaintext comes out into the connection's read
//! buffer; writing, the outbound frames go into the session as plaintext
//! (as much as its buffer limit takes) and the records it makes go to the
//! socket. The handshake happens on the way: its records are written when
//! the connection is next flushed, which the worker does after every read.

use std::io::{self, IoSlice, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection};

/// Why the TLS settings cannot be used, naming the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file does not read as PEM certificates.
    #[error("tls.cert {path}: {source}")]
    Cert {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rustls::pki_types::pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("tls.cert {0}: no certificate in it")]
    NoCert(PathBuf),
    /// The key file does not read as a PEM private key.
    #[error("tls.key {path}: {source}")]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rustls::pki_types::pem::Error,
    },
    /// The certificate and key do not make a TLS configuration.
    #[error("tls: {0}")]
    Config(#[from] rustls::Error),
}

/// The server's TLS settings from a PEM certificate chain and key.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Cert {
            path: cert.to_owned(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCert(cert.to_owned()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Key {
        path: key.to_owned(),
        source,
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))?;
    Ok(Arc::new(config))
}

/// PEM files for trying TLS without a real certificate authority: a new
/// CA, and a certificate for `names` (host names or IP addresses) that it
/// signed, with the certificate's key.
pub struct DevCertificates {
    /// The CA's certificate: what a client trusts (`--tls-ca`).
    pub ca: String,
    /// The server's certificate (`tls.cert`).
    pub cert: String,
    /// The server certificate's private key (`tls.key`).
    pub key: String,
}

/// Makes a test CA and a server certificate it signed for `names`; each
/// call makes another, unrelated CA.
pub fn dev_certificates(names: &[String]) -> Result<DevCertificates, rcgen::Error> {
    use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair};
    // Distinct subjects: OpenSSL (mosquitto's clients) takes a certificate
    // whose subject is its issuer's for a self-signed one.
    let named = |cn: &str| {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        dn
    };
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name = named("Herald test CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    params.distinguished_name = named(names.first().map_or("server", String::as_str));
    let cert = params.signed_by(&key, &ca, &ca_key)?;
    Ok(DevCertificates {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Reads what the socket has, decrypted: Ok(0) at the end of the stream
/// (a close_notify or a closed socket), `WouldBlock` when nothing more is
/// there now.
pub fn read(
    tls: &mut ServerConnection,
    socket: &mut impl Read,
    buf: &mut [u8],
) -> io::Result<usize> {
    loop {
        match tls.reader().read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if tls.read_tls(socket)? == 0 {
            return Ok(0);
        }
        // A bad record or a failed handshake: say so (the alert goes out
        // with the next flush) and give up on the connection.
        tls.process_new_packets()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    }
}

/// The plaintext side of a TLS session, for `Outbound::write_to`: it takes
/// what the session's buffer has room for, sending records to the socket
/// to make room, and blocks (`WouldBlock`) only when the socket does.
pub struct Plaintext<'a, S: Write> {
    tls: &'a mut ServerConnection,
    socket: &'a mut S,
    /// The socket took no more.
    blocked: bool,
}

impl<'a, S: Write> Plaintext<'a, S> {
    /// The plaintext side of `tls` over `socket`.
    pub fn new(tls: &'a mut ServerConnection, socket: &'a mut S) -> Self {
        Plaintext {
            tls,
            socket,
            blocked: false,
        }
    }

    /// Whether the socket blocked (rather than the session waiting for
    /// its handshake).
    pub fn socket_blocked(&self) -> bool {
        self.blocked
    }

    /// Sends the session's records until it has none or the socket blocks.
    pub fn send_records(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(self.socket) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) => {
                    self.blocked = e.kind() == io::ErrorKind::WouldBlock;
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

impl<S: Write> Write for Plaintext<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        loop {
            let n = self.tls.writer().write_vectored(bufs)?;
            if n > 0 || bufs.iter().all(|b| b.is_empty()) {
                return Ok(n);
            }
            if !self.tls.wants_write() {
                // Full, and nothing to send: the handshake is not done.
                return Err(io::ErrorKind::WouldBlock.into());
            }
            // The session's buffer is full: empty it into the socket.
            self.send_records()?;
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_records()
    }
}
