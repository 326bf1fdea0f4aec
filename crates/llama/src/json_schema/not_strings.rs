//! A rule for JSON strings that are none of a set of strings (the keys an
//! object's other properties may not take), walked over a trie of them.

use std::collections::BTreeMap;

#[derive(Default)]
struct TrieNode {
    children: BTreeMap<char, usize>,
    end: bool,
}

/// The rule body matching a quoted JSON string other than every one of
/// `strings`, with `char_rule` the rule of one string character.
pub fn not_strings(strings: &[String], char_rule: &str) -> String {
    let mut nodes = vec![TrieNode::default()];
    for s in strings {
        let mut cur = 0;
        for c in s.chars() {
            cur = match nodes[cur].children.get(&c) {
                Some(&n) => n,
                None => {
                    nodes.push(TrieNode::default());
                    let n = nodes.len() - 1;
                    nodes[cur].children.insert(c, n);
                    n
                }
            };
        }
        nodes[cur].end = true;
    }
    let mut out = String::from("[\"] ( ");
    visit(&nodes, 0, char_rule, &mut out);
    out.push_str(" )");
    if !nodes[0].end {
        out.push('?');
    }
    out.push_str(" [\"]");
    out
}

fn visit(nodes: &[TrieNode], idx: usize, char_rule: &str, out: &mut String) {
    let node = &nodes[idx];
    let mut rejects = String::new();
    for (i, (&c, &child)) in node.children.iter().enumerate() {
        rejects.push(c);
        if i > 0 {
            out.push_str(" | ");
        }
        out.push('[');
        out.push(c);
        out.push(']');
        if nodes[child].children.is_empty() {
            out.push(' ');
            out.push_str(char_rule);
            out.push('+');
        } else {
            out.push_str(" (");
            visit(nodes, child, char_rule, out);
            out.push(')');
        }
    }
    if !node.children.is_empty() {
        out.push_str(" | [^\"");
        out.push_str(&rejects);
        out.push_str("] ");
        out.push_str(char_rule);
        out.push('*');
    }
}

#[cfg(test)]
mod tests {
    use super::not_strings;

    #[test]
    fn one_word_is_refused_and_everything_else_is_allowed() {
        assert_eq!(
            not_strings(&["a".into()], "char"),
            r#"["] ( [a] char+ | [^"a] char* )? ["]"#
        );
    }

    #[test]
    fn shared_prefixes_branch_in_the_trie() {
        assert_eq!(
            not_strings(&["and".into(), "also".into()], "char"),
            r#"["] ( [a] ([l] ([s] ([o] char+ | [^"o] char*) | [^"s] char*) | [n] ([d] char+ | [^"d] char*) | [^"ln] char*) | [^"a] char* )? ["]"#
        );
    }
}
