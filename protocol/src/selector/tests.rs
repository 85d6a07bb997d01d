use bytes::BytesMut;

use super::*;
use crate::destination::Destination;
use crate::message::Message;
use crate::value::Value;

fn message(props: &[(&str, Value)]) -> BytesMut {
    let mut m = Message::text("body").persistent();
    m.set_destination(Some(Destination::topic("t")));
    m.set_message_id("ID:7");
    m.priority = 6;
    m.set_message_type(Some("car".into()));
    for (k, v) in props {
        m.set_property(*k, v.clone());
    }
    let mut b = BytesMut::new();
    m.encode(&mut b).unwrap();
    b
}

fn sel(src: &str, props: &[(&str, Value)]) -> bool {
    sel_within(src, props, &SelectorLimits::default())
}

fn sel_within(src: &str, props: &[(&str, Value)], limits: &SelectorLimits) -> bool {
    let s = Selector::parse_within(src, limits).unwrap_or_else(|e| panic!("{src:.200}: {e}"));
    let block = message(props);
    let r = MessageRef::parse(&block).unwrap();
    s.matches(&r)
}

fn s(v: &str) -> Value {
    Value::String(v.into())
}

#[test]
fn the_specification_examples() {
    let car = [("color", s("blue")), ("weight", Value::I32(3000))];
    assert!(sel(
        "JMSType = 'car' AND color = 'blue' AND weight > 2500",
        &car
    ));
    assert!(!sel(
        "JMSType = 'car' AND color = 'red' AND weight > 2500",
        &car
    ));
    for (country, want) in [("UK", true), ("France", true), ("Peru", false)] {
        assert_eq!(
            sel(
                "Country IN ('UK', 'US', 'France')",
                &[("Country", s(country))]
            ),
            want
        );
        assert_eq!(
            sel(
                "Country NOT IN ('UK', 'US', 'France')",
                &[("Country", s(country))]
            ),
            !want
        );
    }
    for (phone, want) in [("123", true), ("12993", true), ("1234", false)] {
        assert_eq!(
            sel("phone LIKE '12%3'", &[("phone", s(phone))]),
            want,
            "{phone}"
        );
        assert_eq!(
            sel("phone NOT LIKE '12%3'", &[("phone", s(phone))]),
            !want,
            "{phone}"
        );
    }
    assert!(sel("word LIKE 'l_se'", &[("word", s("lose"))]));
    assert!(!sel("word LIKE 'l_se'", &[("word", s("loose"))]));
    assert!(sel(
        r"underscored LIKE '\_%' ESCAPE '\'",
        &[("underscored", s("_foo"))]
    ));
    assert!(!sel(
        r"underscored LIKE '\_%' ESCAPE '\'",
        &[("underscored", s("bar"))]
    ));
    for (age, want) in [(15, true), (19, true), (14, false), (20, false)] {
        assert_eq!(
            sel("age BETWEEN 15 AND 19", &[("age", Value::I32(age))]),
            want
        );
        assert_eq!(
            sel("age NOT BETWEEN 15 AND 19", &[("age", Value::I32(age))]),
            !want
        );
    }
    assert!(sel("prop_name IS NULL", &[]));
    assert!(!sel("prop_name IS NOT NULL", &[]));
    assert!(sel(
        "prop_name IS NOT NULL",
        &[("prop_name", Value::Bool(false))]
    ));
}

#[test]
fn null_is_unknown_and_unknown_is_not_true() {
    assert!(!sel("a > 5", &[]));
    assert!(!sel("NOT (a > 5)", &[]));
    assert!(sel("a > 5 OR b = 1", &[("b", Value::I32(1))]));
    assert!(!sel("a > 5 AND b = 1", &[("b", Value::I32(1))]));
    assert!(
        sel("NOT (a > 5 AND b = 1)", &[("b", Value::I32(2))]),
        "FALSE AND UNKNOWN is FALSE"
    );
    assert!(!sel("a LIKE 'x%'", &[]));
    assert!(!sel("a NOT LIKE 'x%'", &[]));
    assert!(!sel("a NOT IN ('x')", &[]));
    assert!(!sel("a NOT BETWEEN 1 AND 2", &[]));
    assert!(!sel("a = NULL", &[("a", Value::I32(1))]));
}

#[test]
fn type_mismatches_are_unknown() {
    let eu = [("region", s("EU")), ("flag", Value::Bool(true))];
    assert!(!sel("region = 5", &eu));
    assert!(!sel("NOT (region = 5)", &eu));
    assert!(!sel("region > 'A'", &eu), "strings do not order");
    assert!(!sel("flag > FALSE", &eu), "booleans do not order");
    assert!(sel("flag = TRUE", &eu));
    assert!(sel("flag", &eu), "a boolean property alone is a condition");
    assert!(!sel("region LIKE 'E%' AND flag = 'true'", &eu));
}

#[test]
fn numbers_promote_and_compute() {
    let p = [
        ("units", Value::I32(3)),
        ("b", Value::I8(-2)),
        ("f", Value::F32(1.5)),
        ("big", Value::I64(1 << 40)),
    ];
    assert!(sel("units = 3.0", &p));
    assert!(sel("f > 1", &p));
    assert!(sel("units * 2 + 1 = 7", &p));
    assert!(sel("units / 2 = 1", &p), "integer division");
    assert!(sel("units / 2.0 = 1.5", &p));
    assert!(!sel("units / 0 = 1", &p), "division by zero is unknown");
    assert!(sel("-b = 2", &p));
    assert!(sel("big > 1099511627775", &p));
    assert!(sel("big = 0x10000000000", &p));
    assert!(sel("units = 3L AND f < 1.6e0 AND f > .5", &p));
    assert!(sel("units + f = 4.5", &p));
}

#[test]
fn headers_are_visible() {
    assert!(sel("JMSPriority > 4", &[]));
    assert!(sel("JMSDeliveryMode = 'PERSISTENT'", &[]));
    assert!(sel("JMSMessageID = 'ID:7'", &[]));
    assert!(sel("JMSCorrelationID IS NULL", &[]));
    assert!(sel("JMSTimestamp = 0 AND JMSExpiration = 0", &[]));
}

#[test]
fn the_delivery_count_is_the_delivery_being_made() {
    let s = Selector::parse("JMSXDeliveryCount > 1").unwrap();
    let block = message(&[("JMSXGroupID", Value::String("g1".into()))]);
    let r = MessageRef::parse(&block).unwrap();
    assert!(!s.matches(&r), "a first delivery counts 1");
    assert!(s.matches_delivery(&r, 2));
    assert!(sel(
        "JMSXGroupID = 'g1'",
        &[("JMSXGroupID", Value::String("g1".into()))]
    ));
}

#[test]
fn strings_keywords_and_regexes() {
    assert!(sel("name = 'O''Brien'", &[("name", s("O'Brien"))]));
    assert!(sel(
        "a between 1 and 3 and b is not null",
        &[("a", Value::I32(2)), ("b", s(""))]
    ));
    assert!(sel("region MATCHES '^EU|^NA'", &[("region", s("NA-west"))]));
    assert!(!sel("region MATCHES '^EU|^NA'", &[("region", s("ASIA"))]));
    assert!(sel("region NOT MATCHES '^EU'", &[("region", s("ASIA"))]));
    assert!(
        sel("x LIKE '%.%'", &[("x", s("a.b"))]),
        "regex metacharacters are literal in LIKE"
    );
    assert!(!sel("x LIKE '%.%'", &[("x", s("ab"))]));
    assert!(sel("x LIKE 'a%'", &[("x", s("a\nb"))]), "% spans newlines");
}

#[test]
fn errors_name_the_position() {
    for (src, position) in [
        ("region = ", 9),
        ("region LIKE 5", 12),
        ("a +", 3),
        ("name = 'abc", 7),
        ("x MATCHES '('", 10),
        ("a NOT b", 6),
        ("(a = 1", 6),
        ("a = 1 b", 6),
        ("a # 1", 2),
        ("5 LIKE 'x'", 0),
        ("a LIKE 'x' ESCAPE 'ab'", 18),
        ("a IN ()", 6),
        ("a = 1e", 4),
        ("a = 99999999999999999999", 4),
    ] {
        match Selector::parse(src) {
            Err(e) => assert_eq!(e.position, position, "{src}: {e}"),
            Ok(_) => panic!("{src} parsed"),
        }
    }
    let e = Selector::parse("1 + 2").unwrap_err();
    assert!(e.message.contains("not a condition"), "{e}");
    assert!(Selector::parse("").is_err());
}

#[test]
fn errors_say_what_was_expected_in_words() {
    for (src, position, words) in [
        (
            "region == 'EU'",
            7,
            "'==' is not a selector operator: use = for equality",
        ),
        ("region != 'EU'", 7, "use <> for inequality"),
        ("a = 1 && b = 2", 6, "use AND"),
        ("a = 1 || b = 2", 6, "use OR"),
        (
            "region = ",
            9,
            "expected a value, an identifier or (, found the end",
        ),
        (
            "a = 1 b",
            6,
            "expected an operator or the end, found the identifier b",
        ),
        ("a = 1 'x'", 6, "found the string 'x'"),
        ("(a = 1", 6, "found the end"),
        ("a = = 1", 4, "found '='"),
        ("a = AND", 4, "found the keyword AND"),
    ] {
        let e = Selector::parse(src).unwrap_err();
        assert_eq!(e.position, position, "{src}: {e}");
        assert!(e.message.contains(words), "{src}: {e}");
        assert!(
            !e.message.contains("Op(") && !e.message.contains("Kw("),
            "{src}: {e}"
        );
    }
}

/// Room for the long selectors that test flat chains and many names.
const LARGE: SelectorLimits = SelectorLimits {
    max_length: 1 << 20,
    max_depth: 64,
    max_nodes: 1 << 20,
    max_regex_bytes: 1 << 20,
    eval_budget: 1 << 30,
};

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    let deep = format!("{}a = 1{}", "(".repeat(1000), ")".repeat(1000));
    let e = Selector::parse(&deep).unwrap_err();
    assert!(e.message.contains("levels deep"), "{e}");
    for prefix in ["NOT ", "- ", "+ "] {
        let src = format!("{}a = 1", prefix.repeat(1000));
        let e = Selector::parse(&src).unwrap_err();
        assert!(e.message.contains("levels deep"), "{prefix}: {e}");
    }
    let chain = format!("a = 1{}", " + 1".repeat(1000));
    assert!(Selector::parse(&chain).is_err());
    // Within the limit it parses, and evaluates on a small stack.
    let limits = SelectorLimits::default();
    let ok = format!(
        "{}a = 1{}",
        "(".repeat(limits.max_depth - 1),
        ")".repeat(limits.max_depth - 1)
    );
    let handle = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || sel(&ok, &[("a", Value::I32(1))]))
        .unwrap();
    assert!(handle.join().unwrap());
}

#[test]
fn long_and_or_chains_are_flat() {
    let ors = (0..1500)
        .map(|i| format!("a = {i}"))
        .collect::<Vec<_>>()
        .join(" OR ");
    let handle = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            (
                sel_within(&ors, &[("a", Value::I32(1499))], &LARGE),
                sel_within(&ors, &[("a", Value::I32(1500))], &LARGE),
            )
        })
        .unwrap();
    assert_eq!(handle.join().unwrap(), (true, false));
    assert!(sel(
        "a = 1 AND b = 2 AND c IS NULL",
        &[("a", Value::I32(1)), ("b", Value::I32(2))]
    ));
    assert!(!sel("a = 1 AND b = 2", &[("a", Value::I32(1))]));
    assert!(sel("NOT (a = 1 AND b = 2)", &[("a", Value::I32(2))]));
}

#[test]
fn size_and_terms_are_bounded() {
    let limits = SelectorLimits::default();
    let long = format!("a = '{}'", "x".repeat(limits.max_length));
    assert!(Selector::parse(&long)
        .unwrap_err()
        .message
        .contains("bytes long"));
    let small = SelectorLimits {
        max_nodes: 10,
        ..limits
    };
    let many = (0..20)
        .map(|i| format!("a = {i}"))
        .collect::<Vec<_>>()
        .join(" OR ");
    let e = Selector::parse_within(&many, &small).unwrap_err();
    assert!(e.message.contains("terms"), "{e}");
}

#[test]
fn a_huge_regex_is_refused_and_a_small_one_counts_its_memory() {
    let e = Selector::parse("s MATCHES '(?:\\p{L}|\\p{N}){200}'").unwrap_err();
    assert!(e.message.contains("regular expression"), "{e}");
    let small = Selector::parse("s MATCHES '^[A-Z]{3}-[0-9]+$'").unwrap();
    let plain = Selector::parse("s = 'x'").unwrap();
    assert!(
        small.memory() > plain.memory() + 1024,
        "{} {}",
        small.memory(),
        plain.memory()
    );
    assert!(small.memory() < 1 << 20, "{}", small.memory());
}

#[test]
fn evaluation_stops_at_its_budget() {
    // 2,000 %a against 300 KB: linear LIKE matching finishes at once.
    let pattern = format!("s LIKE '{}b'", "%a".repeat(2000));
    let big = "a".repeat(300_000);
    assert!(!sel(&pattern, &[("s", s(&big))]));
    assert!(sel(&pattern, &[("s", s(&format!("{big}b")))]));
    // A budget too small for the string: not selected, even under NOT.
    let tight = SelectorLimits {
        eval_budget: 1000,
        ..SelectorLimits::default()
    };
    let sel_tight = |src: &str, value: &str| {
        let selector = Selector::parse_within(src, &tight).unwrap();
        let block = message(&[("s", s(value))]);
        selector.matches(&MessageRef::parse(&block).unwrap())
    };
    assert!(sel_tight("s LIKE '%x%'", "axb"));
    assert!(!sel_tight("s LIKE '%x%'", &"a".repeat(5000)));
    assert!(!sel_tight("NOT (s LIKE '%x%')", &"a".repeat(5000)));
    assert!(!sel_tight("s MATCHES 'x'", &"a".repeat(5000)));
}

#[test]
fn many_identifiers_against_many_properties() {
    let props: Vec<(String, Value)> = (0..20_000)
        .map(|i| (format!("p{i}"), Value::I32(i)))
        .collect();
    let borrowed: Vec<(&str, Value)> = props.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let src = (0..2000)
        .map(|i| format!("p{} = {}", i * 7, i * 7))
        .collect::<Vec<_>>()
        .join(" AND ");
    assert!(sel_within(&src, &borrowed, &LARGE));
    assert!(!sel_within(&format!("{src} AND p5 = 6"), &borrowed, &LARGE));
}

#[test]
fn a_character_that_starts_no_token_is_an_error_not_a_hang() {
    // Found by the property tests: the lexer took a non-ASCII symbol for
    // the start of an empty identifier and looped, growing without end.
    for bad in ["€ = 1", "a = 1 AND ¬b", "→"] {
        let e = Selector::parse(bad).unwrap_err();
        assert!(e.message.contains("unexpected character"), "{bad}: {e}");
    }
    assert!(sel("café = 'au lait'", &[("café", s("au lait"))]));
}

#[test]
fn the_equality_a_selector_requires_is_found_only_where_it_is_required() {
    let key = |src: &str| {
        Selector::parse(src)
            .unwrap()
            .required_equality()
            .map(|(name, key)| (name.to_owned(), key))
    };
    let long = |n: &str, v| Some((n.to_owned(), IndexKey::Long(v)));
    assert_eq!(key("n = 5"), long("n", 5));
    assert_eq!(key("5 = n"), long("n", 5));
    assert_eq!(
        key("color = 'blue' AND weight > 2500"),
        Some(("color".to_owned(), IndexKey::Str("blue".into())))
    );
    assert_eq!(key("weight > 2500 AND n = 7"), long("n", 7));
    for none in [
        "n = 5 OR m = 6",
        "NOT n = 5",
        "n <> 5",
        "n = 5.0",
        "n = m",
        "JMSPriority = 4",
        "JMSType = 'car'",
        "n = TRUE",
        "n = 9007199254740993",
        "n IN ('a', 'b')",
    ] {
        assert_eq!(key(none), None, "{none}");
    }
}

use proptest::prelude::Strategy;

proptest::proptest! {
    /// Whatever a selector selects has, in the property it requires, the
    /// key it requires: an index by that key misses no message.
    #[test]
    fn a_selected_message_has_the_required_key(
        literal in proptest::prop_oneof![
            (-3i64..4).prop_map(|v| v.to_string()),
            proptest::sample::select(vec!["'a'", "'b'", "'1'"]).prop_map(str::to_owned),
        ],
        value in proptest::prop_oneof![
            (-3i64..4).prop_map(Value::I64),
            (-3i32..4).prop_map(Value::I32),
            (-3i8..4).prop_map(Value::I8),
            proptest::sample::select(vec![-2.0, 0.0, 1.0, 1.5, 3.0]).prop_map(Value::F64),
            proptest::sample::select(vec![1.0f32, 2.5]).prop_map(Value::F32),
            proptest::sample::select(vec!["a", "b", "1"]).prop_map(s),
            proptest::bool::ANY.prop_map(Value::Bool),
        ],
        shadow in proptest::option::of((-3i64..4).prop_map(Value::I64)),
        rest in proptest::sample::select(vec!["", " AND m IS NULL", " AND 1 = 1"]),
    ) {
        let src = format!("n = {literal}{rest}");
        let selector = Selector::parse(&src).unwrap();
        let (name, required) = selector.required_equality().unwrap();
        // A second property of the same name comes after the first, and
        // only the first counts.
        let mut props = vec![("n", value)];
        props.extend(shadow.map(|v| ("n", v)));
        let block = message(&props);
        let m = MessageRef::parse(&block).unwrap();
        if selector.matches(&m) {
            proptest::prop_assert_eq!(IndexKey::of_property(&m, name), Some(required), "{}", src);
        }
    }
}
