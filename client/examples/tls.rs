//! TLS with credentials: `herald+tls://user:password@host:port`, trusting
//! the CA that signed the server's certificate.
//!
//! `HERALD_TLS_URL=herald+tls://alice:secret@localhost:7443 HERALD_TLS_CA=ca.pem cargo run --release -p herald-client --example tls`
//! with a server whose `[tls]` section is set and which knows the user
//! (`herald passwd` makes the password hash for `[[auth.users]]`). The
//! password can stay out of the URL: `ConnectionFactory::with_credentials`.

use herald_client::{AckMode, ConnectionFactory, Destination, Message};

fn main() -> herald_client::Result<()> {
    let url =
        std::env::var("HERALD_TLS_URL").unwrap_or_else(|_| "herald+tls://localhost:7443".into());
    let ca = std::env::var("HERALD_TLS_CA").unwrap_or_else(|_| "ca.pem".into());
    let mut factory = ConnectionFactory::new(&url)?.with_tls_ca(ca);
    if let (Ok(user), Ok(password)) = (
        std::env::var("HERALD_USER"),
        std::env::var("HERALD_PASSWORD"),
    ) {
        factory = factory.with_credentials(user, password);
    }
    let connection = factory.create_connection()?;
    println!("connected over TLS as {}", connection.connection_id());
    let session = connection.create_session(AckMode::Auto)?;
    session.send(
        &Destination::queue("examples.secure"),
        Message::text("over TLS").persistent(),
    )?;
    println!("sent a persistent message over TLS");
    connection.close()
}
