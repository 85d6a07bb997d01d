//! The SASL frames of AMQP 1.0 (part 5.3) that a server with PLAIN and
//! ANONYMOUS needs: the mechanisms it offers, the client's init (its
//! mechanism and initial response) and the outcome. Challenge and response
//! (for mechanisms that go back and forth) are read as well, to be refused
//! by name.

use bytes::Bytes;

use super::fields::{composite, descriptor_code, opt, Fields};
use super::types::Value;
use super::AmqpError;

/// A SASL frame's body.
#[derive(Debug, Clone, PartialEq)]
pub enum Sasl {
    /// `sasl-mechanisms`: what the server offers.
    Mechanisms(Vec<String>),
    /// `sasl-init`: the client's choice and first response.
    Init {
        /// The mechanism chosen.
        mechanism: String,
        /// Its initial response (PLAIN: `authzid NUL user NUL password`).
        initial_response: Option<Bytes>,
        /// The host the client asked for.
        hostname: Option<String>,
    },
    /// `sasl-challenge`.
    Challenge(Bytes),
    /// `sasl-response`.
    Response(Bytes),
    /// `sasl-outcome`: 0 ok, 1 auth, 2 sys, 3 sys-perm, 4 sys-temp.
    Outcome {
        /// The outcome code.
        code: u8,
        /// Mechanism data on success.
        additional_data: Option<Bytes>,
    },
}

/// The `sasl-outcome` codes.
pub mod outcome {
    /// Authenticated.
    pub const OK: u8 = 0;
    /// Bad credentials.
    pub const AUTH: u8 = 1;
    /// A system error.
    pub const SYS: u8 = 2;
}

const MECHANISMS: (u64, &str) = (0x40, "amqp:sasl-mechanisms:list");
const INIT: (u64, &str) = (0x41, "amqp:sasl-init:list");
const CHALLENGE: (u64, &str) = (0x42, "amqp:sasl-challenge:list");
const RESPONSE: (u64, &str) = (0x43, "amqp:sasl-response:list");
const OUTCOME: (u64, &str) = (0x44, "amqp:sasl-outcome:list");

impl Sasl {
    /// The SASL frame `value` is.
    pub fn from_value(value: Value) -> Result<Sasl, AmqpError> {
        let known = [MECHANISMS, INIT, CHALLENGE, RESPONSE, OUTCOME];
        let code = descriptor_code(&value, &known).unwrap_or(0);
        Ok(match code {
            0x40 => {
                let f = Fields::of(value, MECHANISMS, "sasl-mechanisms")?;
                Sasl::Mechanisms(f.symbols(0, "sasl-server-mechanisms")?)
            }
            0x41 => {
                let f = Fields::of(value, INIT, "sasl-init")?;
                let mechanism = f
                    .symbol(0, "mechanism")?
                    .ok_or_else(|| AmqpError::Invalid("sasl-init.mechanism is mandatory".into()))?;
                Sasl::Init {
                    mechanism,
                    initial_response: f.binary(1, "initial-response")?,
                    hostname: f.string(2, "hostname")?,
                }
            }
            0x42 => {
                let f = Fields::of(value, CHALLENGE, "sasl-challenge")?;
                Sasl::Challenge(f.binary(0, "challenge")?.unwrap_or_default())
            }
            0x43 => {
                let f = Fields::of(value, RESPONSE, "sasl-response")?;
                Sasl::Response(f.binary(0, "response")?.unwrap_or_default())
            }
            0x44 => {
                let f = Fields::of(value, OUTCOME, "sasl-outcome")?;
                let code = f
                    .ubyte(0, "code")?
                    .ok_or_else(|| AmqpError::Invalid("sasl-outcome.code is mandatory".into()))?;
                Sasl::Outcome {
                    code,
                    additional_data: f.binary(1, "additional-data")?,
                }
            }
            _ => return Err(AmqpError::Invalid(format!("not a SASL frame: {value:?}"))),
        })
    }

    /// As a described list.
    pub fn to_value(&self) -> Value {
        match self {
            Sasl::Mechanisms(names) => {
                // Mandatory and multiple: an array even of one.
                let names = Value::Array(names.iter().cloned().map(Value::Symbol).collect());
                composite(MECHANISMS.0, vec![names])
            }
            Sasl::Init {
                mechanism,
                initial_response,
                hostname,
            } => composite(
                INIT.0,
                vec![
                    Value::Symbol(mechanism.clone()),
                    opt(initial_response.clone(), Value::Binary),
                    opt(hostname.clone(), Value::String),
                ],
            ),
            Sasl::Challenge(b) => composite(CHALLENGE.0, vec![Value::Binary(b.clone())]),
            Sasl::Response(b) => composite(RESPONSE.0, vec![Value::Binary(b.clone())]),
            Sasl::Outcome {
                code,
                additional_data,
            } => composite(
                OUTCOME.0,
                vec![
                    Value::Ubyte(*code),
                    opt(additional_data.clone(), Value::Binary),
                ],
            ),
        }
    }
}

/// PLAIN's initial response (RFC 4616): `authzid NUL authcid NUL passwd`;
/// the user and password, or why not.
pub fn plain_credentials(response: &[u8]) -> Result<(String, String), AmqpError> {
    let mut parts = response.split(|b| *b == 0);
    let (Some(_authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AmqpError::Invalid(
            "a PLAIN response is authzid NUL user NUL password".into(),
        ));
    };
    let text = |b: &[u8]| {
        String::from_utf8(b.to_vec())
            .map_err(|_| AmqpError::Invalid("a PLAIN user or password that is not UTF-8".into()))
    };
    Ok((text(user)?, text(password)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(s: Sasl) {
        let mut wire = Vec::new();
        s.to_value().encode(&mut wire);
        let (v, _) = Value::decode(&wire).unwrap();
        assert_eq!(Sasl::from_value(v).unwrap(), s);
    }

    #[test]
    fn sasl_frames_round_trip() {
        round_trip(Sasl::Mechanisms(vec!["PLAIN".into(), "ANONYMOUS".into()]));
        round_trip(Sasl::Mechanisms(vec!["ANONYMOUS".into()]));
        round_trip(Sasl::Init {
            mechanism: "PLAIN".into(),
            initial_response: Some(Bytes::from_static(b"\0alice\0secret")),
            hostname: Some("localhost".into()),
        });
        round_trip(Sasl::Init {
            mechanism: "ANONYMOUS".into(),
            initial_response: None,
            hostname: None,
        });
        round_trip(Sasl::Outcome {
            code: outcome::AUTH,
            additional_data: None,
        });
        round_trip(Sasl::Challenge(Bytes::from_static(b"c")));
        round_trip(Sasl::Response(Bytes::new()));
    }

    #[test]
    fn a_sasl_init_as_qpid_proton_sends_it() {
        // sasl-init: PLAIN, "\0guest\0guest", hostname "localhost".
        let mut wire = vec![0x00, 0x53, 0x41, 0xc0, 0x21, 0x03, 0xa3, 0x05];
        wire.extend(b"PLAIN");
        wire.extend([0xa0, 0x0c, 0x00]);
        wire.extend(b"guest\0guest");
        wire.extend([0xa1, 0x09]);
        wire.extend(b"localhost");
        let (v, used) = Value::decode(&wire).unwrap();
        assert_eq!(used, wire.len());
        let Sasl::Init {
            mechanism,
            initial_response,
            hostname,
        } = Sasl::from_value(v).unwrap()
        else {
            panic!("not an init");
        };
        assert_eq!(
            (mechanism.as_str(), hostname.as_deref()),
            ("PLAIN", Some("localhost"))
        );
        let creds = plain_credentials(&initial_response.unwrap()).unwrap();
        assert_eq!(creds, ("guest".to_owned(), "guest".to_owned()));
    }

    #[test]
    fn bad_sasl_frames_say_what() {
        for (v, words) in [
            (composite(0x41, vec![]), "mechanism is mandatory"),
            (composite(0x44, vec![Value::String("x".into())]), "code"),
            (composite(0x99, vec![]), "not a SASL frame"),
            (Value::Null, "not a SASL frame"),
        ] {
            let e = Sasl::from_value(v).unwrap_err().to_string();
            assert!(e.contains(words), "{e}");
        }
        for bad in [&b"alice"[..], b"\0alice", b"\0a\0b\0c", b"\0\xff\0x"] {
            assert!(plain_credentials(bad).is_err(), "{bad:?}");
        }
    }
}
