//! The socket under a connection: plain TCP, or TLS over it.
//!
//! A connection reads on one thread and writes on another. Over plain TCP
//! each has its own handle on the socket. Over TLS both share the rustls
//! session behind a lock, held only while records are made or opened,
//! never across a socket call: the reader reads ciphertext, then feeds it
//! to the session; the writer hands plaintext to the session, takes the
//! records out, then writes them. Only the writer writes to the socket, so
//! records leave in the order they were made; anything the session has to
//! say on its own (an alert) leaves with the next frame.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::error::{Error, Result};
use crate::sync::lock;

/// TLS settings that trust the certificate authorities in a PEM file, or
/// the system's (`None`): what `herald+tls://` connections use, and what
/// an HTTPS client of the management interface can use
/// (`herald_client::tls_client_config`).
pub fn client_config(ca: Option<&Path>) -> Result<Arc<ClientConfig>> {
    let roots = match ca {
        Some(ca) => roots_from_file(ca)?,
        None => system_roots()?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::InvalidArgument(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

fn roots_from_file(ca: &Path) -> Result<RootCertStore> {
    let bad = |reason: String| Error::Config {
        path: ca.display().to_string(),
        reason,
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad(e.to_string()))? {
        roots
            .add(cert.map_err(|e| bad(e.to_string()))?)
            .map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no CA certificate in it".into()));
    }
    Ok(roots)
}

/// The system's trust store (on Linux, what OpenSSL reads: /etc/ssl/certs
/// and SSL_CERT_FILE / SSL_CERT_DIR). Certificates it cannot parse are
/// skipped, as other TLS clients skip them.
fn system_roots() -> Result<RootCertStore> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or("it is empty".to_owned(), ToString::to_string);
        return Err(Error::InvalidArgument(format!(
            "TLS: no CA given and the system trust store has none ({why}): \
             name the CA that signed the server's certificate (--tls-ca FILE, \
             tls_ca in a client config, with_tls_ca in code)"
        )));
    }
    Ok(roots)
}

/// Says in words why a TLS handshake with `address` failed, and what to do.
fn handshake_failure(address: &str, e: io::Error) -> Error {
    let tls = |reason: String| Error::Tls {
        address: address.to_owned(),
        reason,
    };
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidMessage(_)) => tls(
            "that port does not speak TLS (it answered in plain text): use herald:// for it, \
             or the TLS listener's port"
                .into(),
        ),
        // A CA of the same name as a trusted one fails on its signature.
        Some(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature,
        )) => tls(
            "its certificate is signed by a CA this client does not trust: name that CA \
             (--tls-ca FILE, tls_ca in a client config, with_tls_ca in code)"
                .into(),
        ),
        Some(rustls::Error::InvalidCertificate(why)) => {
            tls(format!("its certificate is not accepted: {why}"))
        }
        _ => Error::io(format!("TLS handshake with {address}"), e),
    }
}

pub(crate) struct Tls {
    session: Mutex<ClientConnection>,
    socket: TcpStream,
    /// Held while records are taken out and written, so that they reach
    /// the socket in order.
    sending: Mutex<()>,
}

impl Tls {
    fn session(&self) -> MutexGuard<'_, ClientConnection> {
        lock(&self.session)
    }
}

/// A connected socket, plain or with a finished TLS handshake.
pub(crate) enum Transport {
    Plain(TcpStream),
    Tls(Arc<Tls>),
}

impl Transport {
    /// Wraps a connected socket; with `tls`, does the handshake (within
    /// the socket's read timeout) and checks the server's certificate
    /// against `host`.
    pub(crate) fn new(
        mut socket: TcpStream,
        tls: Option<(Arc<ClientConfig>, &str)>,
    ) -> Result<Transport> {
        let Some((config, host)) = tls else {
            return Ok(Transport::Plain(socket));
        };
        let name = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(name.to_owned())
            .map_err(|e| Error::InvalidArgument(format!("'{host}' as a TLS server name: {e}")))?;
        let mut session = ClientConnection::new(config, name)
            .map_err(|e| Error::InvalidArgument(format!("TLS: {e}")))?;
        // The writer's own buffer bounds what waits; the session need not.
        session.set_buffer_limit(None);
        while session.is_handshaking() {
            session
                .complete_io(&mut socket)
                .map_err(|e| handshake_failure(host, e))?;
        }
        Ok(Transport::Tls(Arc::new(Tls {
            session: Mutex::new(session),
            socket,
            sending: Mutex::new(()),
        })))
    }

    fn socket(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &t.socket,
        }
    }

    /// A handle to shut the socket down with.
    pub(crate) fn socket_handle(&self) -> io::Result<TcpStream> {
        self.socket().try_clone()
    }

    /// The reading side, for one thread.
    pub(crate) fn reader(&self) -> io::Result<ReadHalf> {
        Ok(match self {
            Transport::Plain(s) => ReadHalf::Plain(s.try_clone()?),
            Transport::Tls(t) => ReadHalf::Tls {
                tls: t.clone(),
                ciphertext: Vec::new(),
                consumed: 0,
            },
        })
    }

    /// The writing side, for one thread.
    pub(crate) fn writer(&self) -> io::Result<WriteHalf> {
        Ok(match self {
            Transport::Plain(s) => WriteHalf::Plain(s.try_clone()?),
            Transport::Tls(t) => WriteHalf::Tls {
                tls: t.clone(),
                records: Vec::new(),
            },
        })
    }
}

/// Reads plaintext.
pub(crate) enum ReadHalf {
    Plain(TcpStream),
    Tls {
        tls: Arc<Tls>,
        /// Ciphertext read and not yet taken by the session (it takes only
        /// as much as its plaintext buffer allows).
        ciphertext: Vec<u8>,
        consumed: usize,
    },
}

impl ReadHalf {
    /// Bounds how long one read waits.
    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            ReadHalf::Plain(s) => s.set_read_timeout(timeout),
            ReadHalf::Tls { tls, .. } => tls.socket.set_read_timeout(timeout),
        }
    }
}

impl Read for ReadHalf {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (tls, ciphertext, consumed) = match self {
            ReadHalf::Plain(s) => return s.read(buf),
            ReadHalf::Tls {
                tls,
                ciphertext,
                consumed,
            } => (tls, ciphertext, consumed),
        };
        loop {
            {
                let mut session = tls.session();
                match session.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if *consumed < ciphertext.len() {
                    let mut rest = &ciphertext[*consumed..];
                    let before = rest.len();
                    session.read_tls(&mut rest)?;
                    *consumed += before - rest.len();
                    session
                        .process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    continue;
                }
            }
            ciphertext.resize(64 * 1024, 0);
            *consumed = 0;
            let n = match (&tls.socket).read(ciphertext) {
                Ok(n) => n,
                Err(e) => {
                    ciphertext.clear();
                    return Err(e);
                }
            };
            ciphertext.truncate(n);
            if n == 0 {
                return Ok(0);
            }
        }
    }
}

/// Writes plaintext.
pub(crate) enum WriteHalf {
    Plain(TcpStream),
    Tls { tls: Arc<Tls>, records: Vec<u8> },
}

impl WriteHalf {
    /// Shuts the socket down, which also wakes the reader.
    pub(crate) fn shutdown(&self) {
        let socket = match self {
            WriteHalf::Plain(s) => s,
            WriteHalf::Tls { tls, .. } => &tls.socket,
        };
        let _ = socket.shutdown(std::net::Shutdown::Both);
    }
}

impl Write for WriteHalf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf).map(|()| buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let (tls, records) = match self {
            WriteHalf::Plain(s) => return s.write_all(buf),
            WriteHalf::Tls { tls, records } => (tls, records),
        };
        let _sending = lock(&tls.sending);
        {
            let mut session = tls.session();
            session.writer().write_all(buf)?;
            records.clear();
            while session.wants_write() {
                session.write_tls(records)?;
            }
        }
        (&tls.socket).write_all(records)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
