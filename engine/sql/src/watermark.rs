//! `WATERMARK FOR col [AS col - INTERVAL '...']` in `CREATE TABLE` (Flink and Arroyo
//! syntax), and Arroyo's `event_time_field` / `watermark_field` WITH options: a table's
//! event time from a `TIMESTAMP` column and the out-of-orderness its watermark allows
//! (issue 32, item 1; decision 0037).
//!
//! sqlparser has no such clause: it is cut out of the statement's tokens before parsing
//! and parsed here on its own, keeping its line and column for errors.

use std::time::Duration;

use sqlparser::ast::{BinaryOperator, Expr, Interval, Value};
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Location, Token, TokenWithSpan};

use super::clauses::at;
use super::dialect::PipelineDialect;
use super::error::SqlError;
use pubsub_engine_spi::{ConnectorOptions, EventTime, FieldType, SourceField};

/// A table's `WATERMARK FOR` clause as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkDef {
    /// The event-time column.
    pub column: String,
    /// The out-of-orderness `AS col - INTERVAL '...'` gives (`AS col`: zero); `None`
    /// without `AS`: the default.
    pub delay: Option<Duration>,
    /// Where `WATERMARK` is written.
    pub at: Location,
}

/// The out-of-orderness of `WATERMARK FOR col` without `AS`, and of the WITH option
/// `event_time_field` without `watermark_field`: 1 s, as the publish-time default (decision
/// 0035) and Arroyo's default for a connector's own timestamp.
pub const DEFAULT_DELAY: Duration = Duration::from_secs(1);

fn is_word(t: &Token, word: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

/// Cuts every `WATERMARK FOR ...` out of the column lists of `tokens` (from the comma
/// before it, or to the comma after it when it comes first, up to the next comma or the
/// list's closing parenthesis) and parses each. Returns the tokens left and
/// the clauses, in order; each belongs to the statement its location falls in.
pub(crate) fn extract(
    tokens: Vec<TokenWithSpan>,
) -> Result<(Vec<TokenWithSpan>, Vec<WatermarkDef>), SqlError> {
    let significant = |i: usize| !matches!(tokens[i].token, Token::Whitespace(_));
    let mut out = Vec::with_capacity(tokens.len());
    let mut defs = Vec::new();
    let mut depth = 0usize;
    // Within a statement: whether it is a CREATE, and whether its first parenthesis (a
    // CREATE TABLE's column list) is the one open now.
    let mut first_word: Option<bool> = None;
    let mut parens = 0usize;
    let mut in_columns = false;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].token {
            Token::LParen => {
                if depth == 0 {
                    parens += 1;
                    in_columns = first_word == Some(true) && parens == 1;
                }
                depth += 1
            }
            Token::RParen => depth = depth.saturating_sub(1),
            Token::SemiColon if depth == 0 => {
                first_word = None;
                parens = 0;
            }
            Token::Word(w) if first_word.is_none() => {
                first_word = Some(w.keyword == sqlparser::keywords::Keyword::CREATE)
            }
            _ => {}
        }
        // `, WATERMARK FOR` or `( WATERMARK FOR` directly inside a parenthesis.
        let next: Vec<usize> = (i + 1..tokens.len())
            .filter(|&j| significant(j))
            .take(2)
            .collect();
        let first = tokens[i].token == Token::LParen;
        let starts = depth == 1
            && in_columns
            && (first || tokens[i].token == Token::Comma)
            && next.len() == 2
            && is_word(&tokens[next[0]].token, "WATERMARK")
            && is_word(&tokens[next[1]].token, "FOR");
        if !starts {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        }
        if first {
            out.push(tokens[i].clone());
        }
        let from = next[0];
        let mut end = from;
        let mut inner = 0usize;
        while end < tokens.len() {
            match tokens[end].token {
                Token::LParen => inner += 1,
                Token::RParen if inner == 0 => break,
                Token::RParen => inner -= 1,
                Token::Comma if inner == 0 => break,
                Token::EOF | Token::SemiColon => break,
                _ => {}
            }
            end += 1;
        }
        defs.push(parse_clause(&tokens[from..end])?);
        // First in the list: its comma goes with it, the next column comes first.
        i = if first && tokens.get(end).is_some_and(|t| t.token == Token::Comma) {
            end + 1
        } else {
            end
        };
    }
    Ok((out, defs))
}

/// `WATERMARK FOR col [AS expr]`, the tokens of one clause.
fn parse_clause(tokens: &[TokenWithSpan]) -> Result<WatermarkDef, SqlError> {
    let start = tokens[0].span.start;
    let here = |m: String| at(start, m);
    let dialect = PipelineDialect::default();
    let mut p = Parser::new(&dialect).with_tokens_with_locations(tokens.to_vec());
    // WATERMARK FOR
    p.next_token();
    p.next_token();
    let column = p
        .parse_identifier()
        .map_err(|e| here(format!("WATERMARK FOR: expected a column name: {e}")))?
        .value;
    let delay = if p.parse_keyword(sqlparser::keywords::Keyword::AS) {
        let expr = p
            .parse_expr()
            .map_err(|e| here(format!("WATERMARK FOR {column}: {e}")))?;
        Some(delay_of(&column, &expr).map_err(here)?)
    } else {
        None
    };
    let rest = p.peek_token();
    if rest.token != Token::EOF {
        return Err(at(
            rest.span.start,
            format!(
                "WATERMARK FOR {column}: expected ',' or ')' after the clause, found {}",
                rest.token
            ),
        ));
    }
    Ok(WatermarkDef {
        column,
        delay,
        at: start,
    })
}

/// The out-of-orderness of `AS expr`: `col` (zero) or `col - INTERVAL '...'`.
fn delay_of(column: &str, expr: &Expr) -> Result<Duration, String> {
    let shape = || {
        format!("WATERMARK FOR {column} AS {expr}: the watermark must be '{column}' or '{column} - INTERVAL ...' (an out-of-orderness of zero or more)")
    };
    let is_column = |e: &Expr| matches!(e, Expr::Identifier(i) if i.value == column);
    match expr {
        Expr::Nested(e) => delay_of(column, e),
        e if is_column(e) => Ok(Duration::ZERO),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Minus,
            right,
        } if is_column(left) => match right.as_ref() {
            Expr::Interval(iv) => interval(iv).map_err(|m| format!("{}: {m}", shape())),
            _ => Err(shape()),
        },
        _ => Err(shape()),
    }
}

/// An `INTERVAL` of fixed length (days count 24 hours; months have no fixed length).
fn interval(iv: &Interval) -> Result<Duration, String> {
    let text = match iv.value.as_ref() {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => s.clone(),
            other => {
                return Err(format!(
                    "the interval's value must be a quoted string, was {other}"
                ))
            }
        },
        other => {
            return Err(format!(
                "the interval's value must be a quoted string, was {other}"
            ))
        }
    };
    if iv.last_field.is_some()
        || iv.leading_precision.is_some()
        || iv.fractional_seconds_precision.is_some()
    {
        return Err("write the interval as INTERVAL 'n' UNIT or INTERVAL 'n unit'".into());
    }
    let text = match &iv.leading_field {
        Some(f) => format!("{text} {f}"),
        None => text,
    };
    let v = arrow::compute::kernels::cast_utils::parse_interval_month_day_nano(&text)
        .map_err(|e| format!("'{text}' is not an interval: {e}"))?;
    if v.months != 0 {
        return Err(format!("'{text}' has months, which have no fixed length"));
    }
    let ns = i128::from(v.days) * 86_400_000_000_000 + i128::from(v.nanoseconds);
    if ns < 0 {
        return Err(format!("'{text}' is negative"));
    }
    u64::try_from(ns)
        .map(Duration::from_nanos)
        .map_err(|_| format!("'{text}' is too long"))
}

/// The table's event time: from its `WATERMARK FOR` clause, or from Arroyo's WITH options
/// `event_time_field` (the column) and `watermark_field` (only the same column: a
/// watermark equal to the event time; Arroyo's computed watermark columns do not exist
/// here). Pulls those options. Errors name the table, the column or option and the value.
pub(crate) fn event_time(
    table: &str,
    fields: &[SourceField],
    watermark: Option<&WatermarkDef>,
    options: &mut ConnectorOptions,
) -> Result<Option<EventTime>, SqlError> {
    let e = |m: String| SqlError(format!("table '{table}': {m}"));
    let field = options
        .pull_opt_str("event_time_field")
        .map_err(|x| e(x.to_string()))?;
    let mark = options
        .pull_opt_str("watermark_field")
        .map_err(|x| e(x.to_string()))?;
    let (column, delay, what) = match (watermark, field, mark) {
        (Some(_), Some(f), _) | (Some(_), None, Some(f)) => {
            return Err(e(format!(
                "has a WATERMARK FOR clause and option 'event_time_field' or 'watermark_field' (was '{f}'): use one"
            )))
        }
        (Some(w), None, None) => (
            w.column.clone(),
            w.delay.unwrap_or(DEFAULT_DELAY),
            format!("WATERMARK FOR {} (line {}, column {})", w.column, w.at.line, w.at.column),
        ),
        (None, Some(f), None) => (f.clone(), DEFAULT_DELAY, format!("option 'event_time_field' ('{f}')")),
        (None, Some(f), Some(m)) if f == m => (f.clone(), Duration::ZERO, format!("option 'event_time_field' ('{f}')")),
        (None, Some(f), Some(m)) => {
            return Err(e(format!(
                "option 'watermark_field' is invalid: only the event-time column '{f}' itself is supported (computed watermark columns are not), was '{m}'"
            )))
        }
        (None, None, Some(m)) => {
            return Err(e(format!(
                "option 'watermark_field' needs option 'event_time_field', was '{m}'"
            )))
        }
        (None, None, None) => return Ok(None),
    };
    let Some(f) = fields.iter().find(|f| f.name == column) else {
        return Err(e(format!("{what}: no column '{column}'")));
    };
    if f.field_type != FieldType::Timestamp {
        return Err(e(format!(
            "{what}: the event-time column must be TIMESTAMP, '{column}' is {}",
            f.field_type.sql_name()
        )));
    }
    Ok(Some(EventTime {
        column,
        out_of_orderness: delay,
    }))
}

#[cfg(test)]
#[path = "watermark_tests.rs"]
mod tests;
