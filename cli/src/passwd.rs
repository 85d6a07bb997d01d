//! `herald passwd`: a password's Argon2 hash for the server's config.
//!
//! The password is read from standard input (one line); on a terminal it
//! is asked for twice, with echo off.

use std::io::{BufRead, IsTerminal, Write};
use std::process::{Command, Stdio};

use herald_client::{Error, Result};

/// Turns the terminal's echo off or on again (best effort: `stty`).
fn echo(on: bool) {
    let _ = Command::new("stty")
        .arg(if on { "echo" } else { "-echo" })
        .stdin(Stdio::inherit())
        .status();
}

fn read_line(prompt: &str, terminal: bool) -> Result<String> {
    if terminal {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
    }
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    if terminal {
        eprintln!();
    }
    read.map_err(|source| Error::Io {
        context: "cannot read the password".into(),
        source,
    })?;
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

/// Reads the password and prints its hash.
pub fn run() -> Result<()> {
    let terminal = std::io::stdin().is_terminal();
    if terminal {
        echo(false);
    }
    let first = read_line("password: ", terminal);
    let again = match (&first, terminal) {
        (Ok(_), true) => read_line("again: ", terminal).map(Some),
        _ => Ok(None),
    };
    if terminal {
        echo(true);
    }
    let password = first?;
    if again?.is_some_and(|a| a != password) {
        return Err(Error::InvalidArgument("the passwords differ".into()));
    }
    if password.is_empty() {
        return Err(Error::InvalidArgument("the password is empty".into()));
    }
    let hash = herald_server::auth::hash_password(&password)
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    println!("{hash}");
    Ok(())
}
