//! The commands a STOMP client sends, parsed once.

use std::fmt;

/// A client frame's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientCommand {
    /// `CONNECT`.
    Connect,
    /// `STOMP` (1.1's other name for CONNECT).
    Stomp,
    /// `SEND`.
    Send,
    /// `SUBSCRIBE`.
    Subscribe,
    /// `UNSUBSCRIBE`.
    Unsubscribe,
    /// `ACK`.
    Ack,
    /// `NACK` (1.1).
    Nack,
    /// `BEGIN`.
    Begin,
    /// `COMMIT`.
    Commit,
    /// `ABORT`.
    Abort,
    /// `DISCONNECT`.
    Disconnect,
}

impl ClientCommand {
    const ALL: [ClientCommand; 11] = [
        ClientCommand::Connect,
        ClientCommand::Stomp,
        ClientCommand::Send,
        ClientCommand::Subscribe,
        ClientCommand::Unsubscribe,
        ClientCommand::Ack,
        ClientCommand::Nack,
        ClientCommand::Begin,
        ClientCommand::Commit,
        ClientCommand::Abort,
        ClientCommand::Disconnect,
    ];

    /// The command a frame names, if a client may send it (commands are
    /// case-sensitive).
    pub fn parse(command: &str) -> Option<ClientCommand> {
        ClientCommand::ALL
            .into_iter()
            .find(|c| c.as_str() == command)
    }

    /// As it is written in a frame.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientCommand::Connect => "CONNECT",
            ClientCommand::Stomp => "STOMP",
            ClientCommand::Send => "SEND",
            ClientCommand::Subscribe => "SUBSCRIBE",
            ClientCommand::Unsubscribe => "UNSUBSCRIBE",
            ClientCommand::Ack => "ACK",
            ClientCommand::Nack => "NACK",
            ClientCommand::Begin => "BEGIN",
            ClientCommand::Commit => "COMMIT",
            ClientCommand::Abort => "ABORT",
            ClientCommand::Disconnect => "DISCONNECT",
        }
    }

    /// CONNECT or STOMP: what opens a session.
    pub fn connects(self) -> bool {
        matches!(self, ClientCommand::Connect | ClientCommand::Stomp)
    }
}

impl fmt::Display for ClientCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_parses_back_and_nothing_else_does() {
        for c in ClientCommand::ALL {
            assert_eq!(ClientCommand::parse(c.as_str()), Some(c));
        }
        for other in [
            "send",
            "MESSAGE",
            "CONNECTED",
            "RECEIPT",
            "ERROR",
            "",
            "SEND ",
        ] {
            assert_eq!(ClientCommand::parse(other), None, "{other:?}");
        }
        assert!(ClientCommand::Stomp.connects() && !ClientCommand::Send.connects());
    }
}
