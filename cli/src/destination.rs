//! Destinations as people type them: `queue://NAME` and `topic://NAME`
//! mean the same in every verb and option; a bare name is a topic, or a
//! queue where the option says so (`--queue`).

use herald_client::{Destination, DestinationKind, Error, Result};

/// `queue://NAME`, `topic://NAME`, or a bare name of kind `bare`.
pub fn parse(text: &str, bare: DestinationKind) -> Result<Destination> {
    Destination::from_uri_or(text, bare).map_err(|e| Error::InvalidArgument(e.to_string()))
}

/// What `--queue VALUE` names: a bare name or `queue://NAME`.
pub fn queue(text: &str) -> Result<Destination> {
    let d = parse(text, DestinationKind::Queue)?;
    if d.kind != DestinationKind::Queue {
        return Err(Error::InvalidArgument(format!(
            "--queue takes a queue, and '{text}' names a topic: drop --queue to use it"
        )));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_schemes_mean_the_same_everywhere() {
        let topic = DestinationKind::Topic;
        assert_eq!(
            parse("queue://a.b", topic).unwrap(),
            Destination::queue("a.b")
        );
        assert_eq!(parse("topic://a", topic).unwrap(), Destination::topic("a"));
        assert_eq!(parse("a.b", topic).unwrap(), Destination::topic("a.b"));
        assert_eq!(queue("orders").unwrap(), Destination::queue("orders"));
        assert_eq!(
            queue("queue://orders").unwrap(),
            Destination::queue("orders")
        );
        assert!(queue("topic://orders")
            .unwrap_err()
            .to_string()
            .contains("names a topic"));
        let e = parse("qeue://x", topic).unwrap_err().to_string();
        assert!(e.contains("queue://NAME or topic://NAME"), "{e}");
    }
}
