//! A PostgreSQL-like dialect that also reads `METADATA FROM 'key'` column options.

use sqlparser::ast::ColumnOption;
use sqlparser::dialect::{Dialect, PostgreSqlDialect};
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

#[derive(Debug)]
pub struct PipelineDialect {
    base: PostgreSqlDialect,
}

impl Default for PipelineDialect {
    fn default() -> Self {
        PipelineDialect {
            base: PostgreSqlDialect {},
        }
    }
}

impl Dialect for PipelineDialect {
    fn is_identifier_start(&self, ch: char) -> bool {
        self.base.is_identifier_start(ch)
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        self.base.is_identifier_part(ch)
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        self.base.is_delimited_identifier_start(ch)
    }

    /// `count(*) FILTER (WHERE ...)` parses (as in PostgreSQL), so that the planner can
    /// refuse it by name and position instead of a syntax error elsewhere in the line.
    fn supports_filter_during_aggregation(&self) -> bool {
        self.base.supports_filter_during_aggregation()
    }

    /// `TEXT[]` declares an array column, as in PostgreSQL (`ARRAY<TEXT>` parses anyway).
    fn supports_array_typedef_with_brackets(&self) -> bool {
        self.base.supports_array_typedef_with_brackets()
    }

    /// `METADATA FROM 'key'` becomes `ColumnOption::DialectSpecific([METADATA, FROM, 'key'])`.
    fn parse_column_option(
        &self,
        parser: &mut Parser,
    ) -> Result<Option<Result<Option<ColumnOption>, ParserError>>, ParserError> {
        if !parser.parse_keywords(&[Keyword::METADATA, Keyword::FROM]) {
            return Ok(None);
        }
        let key = parser.parse_literal_string()?;
        Ok(Some(Ok(Some(ColumnOption::DialectSpecific(vec![
            Token::make_keyword("METADATA"),
            Token::make_keyword("FROM"),
            Token::SingleQuotedString(key),
        ])))))
    }
}
