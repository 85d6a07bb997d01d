//! Destinations as people type them: `queue://NAME` and `topic://NAME`
//! mean the same in every verb and option; a bare name is a topic, or a
//! queue where the option says so (`--queue`).

use herald_client::{Destination, DestinationKind, Error, Result};

/// `queue://NAME`, `topic://NAME`, or a bare name of kind `bare`. A name
/// that looks like an MQTT topic gets a note on stderr (see [`mqtt_note`]).
pub fn parse(text: &str, bare: DestinationKind) -> Result<Destination> {
    let d =
        Destination::from_uri_or(text, bare).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    if let Some(note) = mqtt_note(&d) {
        eprintln!("herald: note: {note}");
    }
    Ok(d)
}

/// What to tell someone who typed an MQTT topic (`sensors/garage/temp`)
/// where Herald's words are separated by dots: to Herald it is one word,
/// which neither `herald sub 'sensors.#'` nor `mosquitto_sub -t
/// 'sensors/#'` receives.
fn mqtt_note(d: &Destination) -> Option<String> {
    if !d.name.contains('/') || d.name.contains('.') {
        return None;
    }
    let herald = herald_protocol::mqtt::topic::filter_to_pattern(&d.name).ok()?;
    let scheme = match d.kind {
        DestinationKind::Topic => "topic",
        DestinationKind::Queue => "queue",
    };
    Some(format!(
        "'{}' is one word to Herald, whose words are separated by dots: \
         MQTT clients' '{}' is {scheme}://{herald} here",
        d.name, d.name
    ))
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

    #[test]
    fn a_name_that_looks_like_an_mqtt_topic_gets_a_note() {
        let note = mqtt_note(&Destination::topic("sensors/garage/temp")).unwrap();
        assert!(note.contains("topic://sensors.garage.temp"), "{note}");
        let note = mqtt_note(&Destination::topic("sensors/#")).unwrap();
        assert!(note.contains("topic://sensors.#"), "{note}");
        assert_eq!(mqtt_note(&Destination::topic("sensors.garage")), None);
        assert_eq!(mqtt_note(&Destination::topic("a.b/c")), None);
    }
}
