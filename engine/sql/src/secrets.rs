//! Option values written in a pipeline's text, found by its tokens (not by parsing: the
//! text may not parse), so that a reply or a log can leave a secret out of what it quotes
//! (SPEC 10).

use sqlparser::tokenizer::{Token, Tokenizer};

/// The value of every option whose key ends with `suffix` (e.g.
/// `service-account-key-file`) written in `text`: the quoted string or word after the key,
/// with or without `=` and comments between. `None` when `text` does not tokenize (an
/// unterminated quote): the caller must then fall back to a cruder search.
pub fn written_option_values(text: &str, suffix: &str) -> Option<Vec<String>> {
    let dialect = super::dialect::PipelineDialect::default();
    let tokens = Tokenizer::new(&dialect, text).tokenize().ok()?;
    let words = |t: &Token| -> Option<String> {
        match t {
            Token::SingleQuotedString(s)
            | Token::DoubleQuotedString(s)
            | Token::NationalStringLiteral(s)
            | Token::EscapedStringLiteral(s) => Some(s.clone()),
            Token::Word(w) => Some(w.value.clone()),
            _ => None,
        }
    };
    let meaningful: Vec<&Token> = tokens
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    let mut out = Vec::new();
    for (i, t) in meaningful.iter().enumerate() {
        if !words(t).is_some_and(|k| k.ends_with(suffix)) {
            continue;
        }
        let mut next = meaningful.get(i + 1);
        if matches!(next, Some(Token::Eq)) {
            next = meaningful.get(i + 2);
        }
        if let Some(v) = next.and_then(|t| words(t)) {
            if !v.trim().is_empty() && !v.ends_with(suffix) {
                out.push(v);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_way_of_writing_the_option_gives_its_value() {
        let key = "service-account-key-file";
        for (text, want) in [
            (
                "WITH ('service-account-key-file' = '/a.json')",
                vec!["/a.json"],
            ),
            (
                "WITH ('service-account-key-file' '/b.json')",
                vec!["/b.json"],
            ),
            (
                "WITH ('service-account-key-file' /* c */ = \"/c.json\")",
                vec!["/c.json"],
            ),
            (
                "WITH ('x.service-account-key-file' = '/d''s.json', 'k' = 'v')",
                vec!["/d's.json"],
            ),
            ("WITH ('project' = 'p')", vec![]),
        ] {
            assert_eq!(written_option_values(text, key).unwrap(), want, "{text}");
        }
        assert_eq!(written_option_values("WITH ('unterminated", key), None);
    }
}
