//! The GBNF parser: llama.cpp's example grammars, the rewriting of
//! repetitions into rules, and errors with line and column.

use super::*;

fn gbnf(text: &str) -> String {
    Grammar::parse(text).unwrap().to_gbnf()
}

fn parse_err(text: &str) -> GrammarError {
    Grammar::parse(text).unwrap_err()
}

/// The (line, column) of a parse error, and its message.
fn at(text: &str) -> (usize, usize, String) {
    match parse_err(text) {
        GrammarError::Parse {
            line,
            column,
            message,
        } => (line, column, message),
        e => panic!("not a parse error: {e}"),
    }
}

#[test]
fn example_grammars_parse() {
    let Some(dir) = test_support::fixtures_with("grammars") else {
        return;
    };
    let mut n = 0;
    for entry in std::fs::read_dir(dir.join("grammars")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "gbnf") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let g = Grammar::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(g.n_rules() > 1, "{}", path.display());
        assert_eq!(g.rule_name(g.root()), Some("root"));
        n += 1;
    }
    assert!(n >= 8, "only {n} grammars");
}

#[test]
fn bounded_repetition_becomes_optional_rules() {
    // S{2,4}: two copies, then S'(2) ::= S S'(1) |, S'(1) ::= S |.
    assert_eq!(
        gbnf(r#"root ::= "a"{2,4}"#),
        "root ::= [a] [a] root_2 \nroot_1 ::= [a] | \nroot_2 ::= [a] root_1 | \n"
    );
    assert_eq!(
        gbnf(r#"root ::= "ab"{3}"#),
        "root ::= [a] [b] [a] [b] [a] [b] \n"
    );
    assert_eq!(
        gbnf(r#"root ::= "a"?"#),
        "root ::= root_1 \nroot_1 ::= [a] | \n"
    );
}

#[test]
fn open_repetition_becomes_a_recursive_rule() {
    assert_eq!(
        gbnf(r#"root ::= "a"*"#),
        "root ::= root_1 \nroot_1 ::= [a] root_1 | \n"
    );
    assert_eq!(
        gbnf(r#"root ::= "a"+"#),
        "root ::= [a] root_1 \nroot_1 ::= [a] root_1 | \n"
    );
    assert_eq!(
        gbnf(r#"root ::= "a"{2,}"#),
        "root ::= [a] [a] root_1 \nroot_1 ::= [a] root_1 | \n"
    );
    // Over the limit, a maximum counts as none (llama.cpp's rule).
    assert_eq!(
        gbnf(r#"root ::= "a"{0,5000}"#),
        "root ::= root_1 \nroot_1 ::= [a] root_1 | \n"
    );
}

#[test]
fn groups_classes_and_escapes() {
    assert_eq!(
        gbnf("root ::= ( \"x\" | [a-c] )\n  # comment\n"),
        "root ::= root_1 \nroot_1 ::= [x] | [a-c] \n"
    );
    let g = Grammar::parse(r"root ::= [^\x41-\u005A\]] .").unwrap();
    let kinds: Vec<_> = g
        .rule(0)
        .unwrap()
        .iter()
        .map(|e| (e.kind, e.value))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (ElementKind::CharNot, 0x41),
            (ElementKind::CharRngUpper, 0x5a),
            (ElementKind::CharAlt, u32::from(b']')),
            (ElementKind::CharAny, 0),
            (ElementKind::End, 0)
        ]
    );
    let g = Grammar::parse(r#"root ::= "\t\n\r\\\"\[\]\-" "\U0001F600""#).unwrap();
    let values: Vec<u32> = g.rule(0).unwrap().iter().map(|e| e.value).collect();
    assert_eq!(
        values,
        vec![9, 10, 13, 92, 34, 91, 93, 45, 0x1f600, 0],
        "{:?}",
        g.rule(0)
    );
    // A newline is allowed inside groups, not between items of a rule.
    assert!(Grammar::parse("root ::= (\n\"a\"\n| \"b\"\n)\n").is_ok());
    let g = Grammar::parse("root ::= \"a\"\n\"b\" ::= x").unwrap_err();
    assert!(
        matches!(
            g,
            GrammarError::Parse {
                line: 2,
                column: 1,
                ..
            }
        ),
        "{g}"
    );
}

#[test]
fn token_references() {
    let g = Grammar::parse("root ::= <[7]> !<[12]>").unwrap();
    let kinds: Vec<_> = g
        .rule(0)
        .unwrap()
        .iter()
        .map(|e| (e.kind, e.value))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (ElementKind::Token, 7),
            (ElementKind::TokenNot, 12),
            (ElementKind::End, 0)
        ]
    );
    let pieces = TokenPieces::new(vec![b"a".to_vec(), b"<think>".to_vec()], &[]);
    let g = Grammar::parse_with_pieces("root ::= <think> \"a\"", &pieces).unwrap();
    assert_eq!(g.rule(0).unwrap()[0], Element::new(ElementKind::Token, 1));
    let (l, c, m) = match Grammar::parse_with_pieces("root ::= \"a\" <nope>", &pieces) {
        Err(GrammarError::Parse {
            line,
            column,
            message,
        }) => (line, column, message),
        r => panic!("{r:?}"),
    };
    assert_eq!((l, c), (1, 14));
    assert!(m.contains("<nope>") && m.contains("one token"), "{m}");
    let (_, _, m) = at("root ::= <think>");
    assert!(m.contains("vocabulary"), "{m}");
}

#[test]
fn errors_give_line_and_column() {
    let (l, c, m) = at("root ::= \"a\"\nitem := \"b\"\n");
    assert_eq!((l, c), (2, 6));
    assert!(m.contains("expecting ::="), "{m}");

    let (l, c, m) = at("root ::= \"abc");
    assert_eq!((l, c), (1, 10));
    assert!(m.contains("unterminated string"), "{m}");

    let (l, c, m) = at("root ::= [a-z");
    assert_eq!((l, c), (1, 10));
    assert!(m.contains("unterminated character class"), "{m}");

    let (l, c, m) = at("root ::= \"\\q\"");
    assert_eq!((l, c), (1, 11));
    assert!(m.contains("unknown escape"), "{m}");

    let (l, c, m) = at("root ::= \"\\x4\"");
    assert_eq!((l, c), (1, 13));
    assert!(m.contains("2 hex digits"), "{m}");

    let (l, c, m) = at("root ::= ( \"a\" | \"b\" \n");
    assert_eq!(l, 2);
    assert_eq!(c, 1);
    assert!(m.contains("expecting ')'"), "{m}");

    let (l, c, m) = at("root ::= \"a\" }");
    assert_eq!((l, c), (1, 14));
    assert!(m.contains("newline"), "{m}");

    let (_, c, m) = at("root ::= * \"a\"");
    assert_eq!(c, 10);
    assert!(m.contains("expecting an item"), "{m}");

    let (_, c, m) = at("root ::= \"a\"{5,2}");
    assert_eq!(c, 13);
    assert!(m.contains("less than its minimum"), "{m}");

    let (_, _, m) = at("root ::= \"a\"{3001}");
    assert!(m.contains("exceeds the limit"), "{m}");

    let (_, _, m) = at("root ::= \"a\"{x}");
    assert!(m.contains("expecting an integer"), "{m}");

    let (_, _, m) = at("root ::= \"a\"{2 3}");
    assert!(m.contains("expecting ',' or '}'"), "{m}");

    let (_, _, m) = at("root ::= \"a\"{99999999999999999999999}");
    assert!(m.contains("too large"), "{m}");

    let (l, c, m) = at("::= \"a\"");
    assert_eq!((l, c), (1, 1));
    assert!(m.contains("expecting a rule name"), "{m}");

    // Non-ASCII text before the error counts in characters.
    let (_, c, _) = at("root ::= \"é\" ]");
    assert_eq!(c, 14);
}

#[test]
fn undefined_rules_are_named_where_first_used() {
    let (l, c, m) = at("root ::= item \"x\"\n\nother ::= \"y\" missing\n");
    assert_eq!((l, c), (1, 10));
    assert!(m.contains("undefined rule 'item'"), "{m}");
    let (l, c, m) = at("root ::= \"x\" | other\nother ::= \"y\" missing\n");
    assert_eq!((l, c), (2, 15));
    assert!(m.contains("'missing'"), "{m}");
}

#[test]
fn root_and_left_recursion() {
    assert_eq!(
        parse_err("item ::= \"x\""),
        GrammarError::NoRoot("root".into())
    );
    assert_eq!(parse_err(""), GrammarError::NoRoot("root".into()));
    assert_eq!(
        parse_err("# only a comment\n"),
        GrammarError::NoRoot("root".into())
    );
    assert_eq!(
        parse_err("root ::= \"b\"\nitem ::= item \"a\" | \"b\""),
        GrammarError::LeftRecursion {
            rule: "item".into(),
            line: 2,
            column: 1
        }
    );
    // Through a rule that may be empty.
    let e = parse_err("root ::= opt expr\nopt ::= \"\" | \"x\"\nexpr ::= root \"+\" | \"1\"\n");
    assert!(matches!(e, GrammarError::LeftRecursion { .. }), "{e}");
    assert!(e.to_string().contains("line "), "{e}");
    // Recursion that consumes first is fine.
    assert!(Grammar::parse("root ::= \"(\" root \")\" | \"x\"").is_ok());
    // A long chain of rules does not overflow the stack.
    let mut text = String::from("root ::= r0\n");
    for i in 0..20000 {
        text.push_str(&format!("r{i} ::= r{}\n", i + 1));
    }
    text.push_str("r20000 ::= \"x\"\n");
    assert!(Grammar::parse(&text).is_ok());
}

#[test]
fn repetitions_that_would_explode_are_refused() {
    let (_, _, m) = at("root ::= (\"a\"{1,100}){1,100}");
    assert!(m.contains("more than 2000 rules"), "{m}");
}

#[test]
fn every_prefix_of_a_grammar_fails_cleanly() {
    // Truncated text anywhere gives an error or a grammar, never a panic.
    let text = "root ::= (\"a\" [b-d\\]]{1,3} | <[5]> !<[6]> .)* \"\\u00e9\" # c\nx ::= \"y\"?\n";
    for (i, _) in text.char_indices() {
        let _ = Grammar::parse(&text[..i]);
    }
}
