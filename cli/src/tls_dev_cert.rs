//! `herald tls-dev-cert [--dir DIR] [--name HOST]...`: a test CA and a
//! server certificate it signed, as PEM files, for trying TLS on one
//! machine. Not for production: the CA's key is not even kept.

use std::path::PathBuf;

use herald_client::{Error, Result};

/// Arguments of `herald tls-dev-cert`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to write ca.pem, cert.pem and key.pem.
    #[arg(long, default_value = "tls")]
    dir: PathBuf,
    /// A host name or IP address the certificate is for. Repeatable.
    #[arg(long = "name", value_name = "HOST", default_values_t = ["localhost".to_owned(), "127.0.0.1".to_owned()])]
    names: Vec<String>,
}

pub fn run(args: Args) -> Result<()> {
    let made = herald_server::net::tls::dev_certificates(&args.names)
        .map_err(|e| Error::InvalidArgument(format!("cannot make the certificates: {e}")))?;
    let dir = &args.dir;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    for (file, pem) in [
        ("ca.pem", &made.ca),
        ("cert.pem", &made.cert),
        ("key.pem", &made.key),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, pem)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    }
    let d = dir.display();
    println!(
        "wrote {d}/ca.pem, {d}/cert.pem and {d}/key.pem for {}",
        args.names.join(", ")
    );
    println!("server: herald-server --tls-listen 127.0.0.1:7443 --tls-cert {d}/cert.pem --tls-key {d}/key.pem");
    println!(
        "client: herald --server herald+tls://localhost:7443 --tls-ca {d}/ca.pem sub 'sales.#'"
    );
    Ok(())
}
