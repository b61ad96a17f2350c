//! Statements -> table and insert definitions (no connector knowledge yet).

use std::fmt;

use sqlparser::ast::{
    ArrayElemTypeDef, ColumnDef, ColumnOption, CreateTable, CreateTableOptions, DataType, Expr,
    Ident, Insert, ObjectName, Query, Select, SelectItem, SetExpr, SqlOption, Statement,
    TableFactor, Value,
};
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

use super::clauses::{at, check_create_table, check_insert, object_name, StatementTokens};
use super::dialect::PipelineDialect;
use super::error::SqlError;
use pubsub_engine_spi::{ArrayOf, ConnectorOptions, FieldType, SourceField};

fn err<T>(msg: impl Into<String>) -> Result<T, SqlError> {
    Err(SqlError(msg.into()))
}

/// `CREATE TABLE name (columns) WITH (options)`.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDef {
    pub name: String,
    pub fields: Vec<SourceField>,
    pub options: ConnectorOptions,
    /// `WATERMARK FOR col [AS ...]`, if written (checked when the table is planned).
    pub watermark: Option<super::watermark::WatermarkDef>,
    /// `PRIMARY KEY (cols)` or columns declared `PRIMARY KEY`, in key order: the columns
    /// identifying a changelog source's rows (checked when the table is planned).
    pub primary_key: Vec<String>,
}

/// `INSERT INTO sink [(columns)] SELECT ... FROM source [WHERE ...]`: one per SELECT of
/// the statement (`UNION ALL` of several writes each into the sink).
#[derive(Debug, Clone, PartialEq)]
pub struct InsertDef {
    pub sink: String,
    /// The target column list, if the INSERT names one.
    pub columns: Option<Vec<String>>,
    /// The table the SELECT reads (a join's left side).
    pub source: String,
    /// A join's right side's table.
    pub joined: Option<String>,
    /// The SELECT, one table and no clause `clauses.rs` refuses; positions in its AST are
    /// those of the pipeline file.
    pub query: Box<Query>,
    /// The memory tables inlined in `query` (`CREATE TABLE name (columns)` without
    /// `WITH`), a table after those its own query reads: kept for planning to check
    /// their columns (`memory.rs`).
    pub(crate) memory: Vec<super::memory::MemoryTable>,
}

impl InsertDef {
    /// True when the SELECT has a WHERE condition (some rows may not be written).
    pub fn has_where(&self) -> bool {
        matches!(self.query.body.as_ref(), SetExpr::Select(s) if s.selection.is_some())
    }

    /// True for a windowed aggregate (a GROUP BY, HAVING or a subquery in FROM): its rows
    /// are written when windows fire, one per group.
    pub fn is_windowed(&self) -> bool {
        super::aggregate::is_windowed(&self.query)
    }

    /// `INSERT INTO sink SELECT c1, c2 FROM source`: each sink column from the source
    /// column of the same name (the Rust pipeline graph's `pipe`).
    pub fn by_name(sink: &str, source: &str, columns: &[String]) -> Result<Self, SqlError> {
        let mut statements = Parser::parse_sql(&PipelineDialect::default(), "SELECT c FROM t")
            .map_err(|e| SqlError(format!("SQL syntax error: {e}")))?;
        let Some(Statement::Query(mut query)) = statements.pop() else {
            return err(format!("cannot select the columns of '{source}'"));
        };
        let SetExpr::Select(select) = query.body.as_mut() else {
            return err(format!("cannot select the columns of '{source}'"));
        };
        // Names as they are (resolution does not fold case), printed as a SQL file would.
        select.projection = columns
            .iter()
            .map(|c| SelectItem::UnnamedExpr(Expr::Identifier(Ident::new(c))))
            .collect();
        if let TableFactor::Table { name, .. } = &mut select.from[0].relation {
            *name = ObjectName::from(vec![Ident::new(source)]);
        }
        Ok(InsertDef {
            sink: sink.to_string(),
            columns: None,
            source: source.to_string(),
            joined: None,
            query,
            memory: Vec::new(),
        })
    }
}

impl fmt::Display for InsertDef {
    /// The statement in canonical form, for errors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "INSERT INTO {}", self.sink)?;
        if let Some(cols) = &self.columns {
            write!(f, " ({})", cols.join(", "))?;
        }
        write!(f, " {}", self.query)
    }
}

/// Every statement of a pipeline file, in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PipelineSql {
    pub tables: Vec<TableDef>,
    pub inserts: Vec<InsertDef>,
}

/// Parses a pipeline file: statements separated by `;`.
///
/// Errors: syntax errors (with line and column), unsupported statements or types, option
/// values that are not literals, and every clause that is not implemented (named, with its
/// line and column; see `clauses.rs`).
pub fn parse_pipeline(sql: &str) -> Result<PipelineSql, SqlError> {
    let dialect = PipelineDialect::default();
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| SqlError(format!("SQL syntax error: {e}")))?;
    let (tokens, mut watermarks) = super::watermark::extract(tokens)?;
    watermarks.reverse();
    let mut parser = Parser::new(&dialect).with_tokens_with_locations(tokens.clone());
    let syntax = |e: sqlparser::parser::ParserError| SqlError(format!("SQL syntax error: {e}"));
    let mut out = PipelineSql::default();
    let mut views = super::views::Views::default();
    let mut memory = super::memory::MemoryTables::default();
    let mut pending = Vec::new();
    loop {
        while parser.consume_token(&Token::SemiColon) {}
        if parser.peek_token().token == Token::EOF {
            break;
        }
        let first = parser.index();
        let st = parser.parse_statement().map_err(syntax)?;
        let tokens = StatementTokens {
            tokens: &tokens[first.min(tokens.len())..parser.index().min(tokens.len())],
            after: None,
        };
        let next = parser.peek_token();
        if !matches!(next.token, Token::SemiColon | Token::EOF) {
            return Err(at(
                next.span.start,
                format!(
                    "SQL syntax error: expected ';' after the statement, found {}",
                    next.token
                ),
            ));
        }
        if let Some(w) = watermarks.last().filter(|w| w.at < tokens.start()) {
            return Err(at(
                w.at,
                "WATERMARK FOR belongs inside a CREATE TABLE's column list".into(),
            ));
        }
        match st {
            Statement::CreateTable(ct) => {
                check_create_table(&ct, &tokens)?;
                let mut table = create_table(&ct, &out.tables)?;
                if views.contains(&table.name) {
                    return Err(at(
                        tokens.start(),
                        format!("table '{}': the name is already a view's", table.name),
                    ));
                }
                if memory.contains(&table.name) {
                    return Err(at(
                        tokens.start(),
                        format!("table '{}' is defined twice", table.name),
                    ));
                }
                // Its clause: the next one, if it lies within this statement (one that
                // lies before it was refused above).
                let end = tokens.tokens.last().map(|t| t.span.end);
                while let Some(w) = watermarks.pop_if(|w| end.is_some_and(|e| w.at < e)) {
                    if table.watermark.is_some() {
                        return Err(at(
                            w.at,
                            format!("table '{}' has a second WATERMARK FOR clause", table.name),
                        ));
                    }
                    table.watermark = Some(w);
                }
                if super::memory::is_memory(&ct) {
                    memory.create(table, &tokens)?;
                } else {
                    out.tables.push(table);
                }
            }
            Statement::Insert(mut ins) => {
                check_insert(&ins, &tokens)?;
                if let Some(q) = ins.source.as_mut() {
                    views.inline(&mut q.body)?;
                }
                // Checked now, made once the memory tables are known (below).
                inserts(&ins, &tokens)?;
                pending.push(super::memory::PendingInsert { ins, tokens });
            }
            view @ Statement::CreateView { .. } => {
                let tables: Vec<String> = out
                    .tables
                    .iter()
                    .map(|t| t.name.clone())
                    .chain(memory.names().map(String::from))
                    .collect();
                views.create(&view, &tokens, &tables)?;
            }
            other => {
                let text = other.to_string();
                let head: String = text.chars().take(40).collect();
                return Err(at(
                    tokens.start(),
                    format!("unsupported statement: {head}... (only CREATE TABLE, CREATE VIEW and INSERT INTO ... SELECT)"),
                ));
            }
        }
    }
    if let Some(w) = watermarks.pop() {
        return Err(at(
            w.at,
            "WATERMARK FOR belongs inside a CREATE TABLE's column list".into(),
        ));
    }
    // Memory tables: each inlined where it is read, its writing INSERT kept for planning.
    let resolved = memory.resolve(pending)?;
    let mut tables = Vec::new();
    for (table, p, definition) in resolved.writers {
        let writer = inserts(&p.ins, &p.tokens)?
            .pop()
            .expect("a memory table is written by one SELECT");
        tables.push(super::memory::MemoryTable {
            name: table.name,
            fields: table.fields,
            writer,
            writer_at: p.tokens.start(),
            definition,
        });
    }
    for p in resolved.readers {
        for mut ins in inserts(&p.ins, &p.tokens)? {
            ins.memory = super::memory::read_by(&ins.query, &tables);
            out.inserts.push(ins);
        }
    }
    Ok(out)
}

fn create_table(ct: &CreateTable, tables: &[TableDef]) -> Result<TableDef, SqlError> {
    let name = object_name(&ct.name);
    if tables.iter().any(|t| t.name == name) {
        return err(format!("table '{name}' is defined twice"));
    }
    let fields = ct
        .columns
        .iter()
        .map(|c| column(&name, c))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, f) in fields.iter().enumerate() {
        if fields[..i].iter().any(|g| g.name == f.name) {
            return err(format!("table '{name}' declares column '{}' twice", f.name));
        }
    }
    let primary_key = primary_key(&name, ct, &fields)?;
    let mut fields = fields;
    for f in &mut fields {
        // A key column is NOT NULL, as in SQL.
        f.required |= primary_key.contains(&f.name);
    }
    let options = match &ct.table_options {
        CreateTableOptions::With(opts) => table_options(&name, opts)?,
        CreateTableOptions::None => ConnectorOptions::default(),
        other => {
            return err(format!(
                "table '{name}': use WITH (...) for options, not {other}"
            ))
        }
    };
    Ok(TableDef {
        name,
        fields,
        options,
        watermark: None,
        primary_key,
    })
}

/// The primary key: a table constraint `PRIMARY KEY (a, b)` of plain column names, or the
/// columns declared `PRIMARY KEY`; not both. Errors name the table and the column.
fn primary_key(
    table: &str,
    ct: &CreateTable,
    fields: &[SourceField],
) -> Result<Vec<String>, SqlError> {
    let mut key = Vec::new();
    for c in &ct.columns {
        if c.options.iter().any(|o| is_primary_option(&o.option)) {
            key.push(c.name.value.clone());
        }
    }
    for constraint in &ct.constraints {
        let Some(columns) = plain_primary_key(constraint) else {
            continue;
        };
        if !key.is_empty() {
            return err(format!(
                "table '{table}' declares its primary key twice (a PRIMARY KEY constraint and a column declared PRIMARY KEY)"
            ));
        }
        for c in columns {
            if !fields.iter().any(|f| f.name == c) {
                return err(format!(
                    "table '{table}': PRIMARY KEY names column '{c}', which the table does not declare"
                ));
            }
            if key.contains(&c) {
                return err(format!(
                    "table '{table}': PRIMARY KEY names column '{c}' twice"
                ));
            }
            key.push(c);
        }
    }
    Ok(key)
}

/// `PRIMARY KEY` as a column option (without characteristics).
pub(crate) fn is_primary_option(o: &ColumnOption) -> bool {
    matches!(
        o,
        ColumnOption::Unique {
            is_primary: true,
            characteristics: None
        }
    )
}

/// The columns of a table constraint `PRIMARY KEY (a, b)` written without a name, index
/// or option, each a plain column name; `None` for any other constraint.
pub(crate) fn plain_primary_key(c: &sqlparser::ast::TableConstraint) -> Option<Vec<String>> {
    let sqlparser::ast::TableConstraint::PrimaryKey {
        name: None,
        index_name: None,
        index_type: None,
        columns,
        index_options,
        characteristics: None,
    } = c
    else {
        return None;
    };
    if !index_options.is_empty() {
        return None;
    }
    columns
        .iter()
        .map(
            |c| match (&c.column.expr, &c.operator_class, &c.column.with_fill) {
                (Expr::Identifier(i), None, None)
                    if c.column.options.asc.is_none() && c.column.options.nulls_first.is_none() =>
                {
                    Some(i.value.clone())
                }
                _ => None,
            },
        )
        .collect()
}

/// One [`InsertDef`] per `SELECT` of the INSERT's query (`UNION ALL` of several selects
/// writes each into the sink, as separate INSERTs would). `check_insert` passed.
fn inserts(ins: &Insert, st: &StatementTokens) -> Result<Vec<InsertDef>, SqlError> {
    let sink = match &ins.table {
        sqlparser::ast::TableObject::TableName(n) => object_name(n),
        other => return err(format!("INSERT INTO {other} is not supported")),
    };
    let what = format!("INSERT INTO {sink}");
    let columns = if ins.columns.is_empty() {
        None
    } else {
        Some(ins.columns.iter().map(|c| c.value.clone()).collect())
    };
    let mut selects = Vec::new();
    if let Some(q) = &ins.source {
        collect_selects(&q.body, &mut selects);
    }
    selects
        .into_iter()
        .map(|select| {
            let Some(name) = read_table(select) else {
                return Err(at(st.start(), format!("{what}: SELECT must read a table")));
            };
            Ok(InsertDef {
                sink: sink.clone(),
                columns: columns.clone(),
                source: object_name(name),
                joined: joined_table(select).map(object_name),
                query: Box::new(Query {
                    with: None,
                    body: Box::new(SetExpr::Select(Box::new(select.clone()))),
                    order_by: None,
                    limit_clause: None,
                    fetch: None,
                    locks: vec![],
                    for_clause: None,
                    settings: None,
                    format_clause: None,
                    pipe_operators: vec![],
                }),
                memory: Vec::new(),
            })
        })
        .collect()
}

/// The table a SELECT reads, through subqueries in FROM (a join's left side).
fn read_table(select: &Select) -> Option<&ObjectName> {
    factor_table(&select.from.first()?.relation)
}

/// The table a join's right side reads.
fn joined_table(select: &Select) -> Option<&ObjectName> {
    factor_table(&select.from.first()?.joins.first()?.relation)
}

fn factor_table(factor: &TableFactor) -> Option<&ObjectName> {
    match factor {
        TableFactor::Table { name, .. } => Some(name),
        TableFactor::Derived { subquery, .. } => {
            let mut selects = Vec::new();
            collect_selects(&subquery.body, &mut selects);
            match selects.as_slice() {
                [one] => read_table(one),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The selects of a query body, left to right (`check_query` allowed only SELECT,
/// parentheses and UNION ALL).
fn collect_selects<'a>(body: &'a SetExpr, out: &mut Vec<&'a Select>) {
    match body {
        SetExpr::Select(s) => out.push(s),
        SetExpr::Query(q) => collect_selects(&q.body, out),
        SetExpr::SetOperation { left, right, .. } => {
            collect_selects(left, out);
            collect_selects(right, out);
        }
        _ => {}
    }
}

fn column(table: &str, c: &ColumnDef) -> Result<SourceField, SqlError> {
    let field_type = match &c.data_type {
        // `TEXT[]`, `ARRAY<TEXT>`, `TEXT ARRAY`: a list of one scalar type (issue 48).
        DataType::Array(def) => {
            let (element, size) = match def {
                ArrayElemTypeDef::AngleBracket(t) | ArrayElemTypeDef::Parenthesis(t) => {
                    (t.as_ref(), None)
                }
                ArrayElemTypeDef::SquareBracket(t, size) => (t.as_ref(), *size),
                ArrayElemTypeDef::None => {
                    return err(format!(
                        "table '{table}' column '{}': ARRAY needs its element type (e.g. TEXT[] or ARRAY<BIGINT>)",
                        c.name.value
                    ))
                }
            };
            if size.is_some() {
                return err(format!(
                    "table '{table}' column '{}': type {} is not supported: an array length would not be enforced; declare {element}[]",
                    c.name.value, c.data_type
                ));
            }
            if matches!(element, DataType::Array(_)) {
                return err(format!(
                    "table '{table}' column '{}': type {} is not supported: arrays do not nest; declare JSON to keep nested arrays as JSON text",
                    c.name.value, c.data_type
                ));
            }
            let e = scalar_type(table, &c.name.value, element)?;
            FieldType::Array(ArrayOf::of(e).expect("a scalar type"))
        }
        other => scalar_type(table, &c.name.value, other)?,
    };
    column_options(table, c, field_type)
}

/// The scalar column type of declared type `t` of column `name`.
fn scalar_type(table: &str, name: &str, t: &DataType) -> Result<FieldType, SqlError> {
    // A length or precision would be a promise the connector does not keep.
    let unenforced = match t {
        DataType::Varchar(Some(_)) | DataType::String(Some(_)) => {
            Some("TEXT has no length limit: declare TEXT")
        }
        DataType::Timestamp(Some(p), _) if *p != 9 => {
            Some("TIMESTAMP keeps nanoseconds: declare TIMESTAMP (or TIMESTAMP(9))")
        }
        DataType::Timestamp(_, tz)
            if matches!(
                tz,
                sqlparser::ast::TimezoneInfo::WithTimeZone | sqlparser::ast::TimezoneInfo::Tz
            ) =>
        {
            Some("TIMESTAMP is UTC without a zone: declare TIMESTAMP")
        }
        DataType::BigInt(Some(_))
        | DataType::Int8(Some(_))
        | DataType::Int(Some(_))
        | DataType::Integer(Some(_))
        | DataType::Int4(Some(_))
        | DataType::BigIntUnsigned(Some(_))
        | DataType::Int8Unsigned(Some(_))
        | DataType::IntUnsigned(Some(_))
        | DataType::IntegerUnsigned(Some(_))
        | DataType::Int4Unsigned(Some(_)) => {
            Some("a display width changes nothing: declare the type without it")
        }
        // No column type of their width: INT UNSIGNED would not keep their range.
        DataType::TinyIntUnsigned(_)
        | DataType::SmallIntUnsigned(_)
        | DataType::Int2Unsigned(_)
        | DataType::MediumIntUnsigned(_) => Some(
            "the unsigned integer types are INT UNSIGNED (0 to 4294967295) and BIGINT UNSIGNED (0 to 18446744073709551615)",
        ),
        DataType::Double(info) | DataType::Float(info)
            if *info != sqlparser::ast::ExactNumberInfo::None =>
        {
            Some("a precision would not be enforced: declare DOUBLE or FLOAT")
        }
        _ => None,
    };
    if let Some(hint) = unenforced {
        return Err(SqlError(format!(
            "table '{table}' column '{name}': type {t} is not supported: {hint}"
        )));
    }
    Ok(match t {
        DataType::Text | DataType::Varchar(_) | DataType::String(_) => FieldType::Text,
        DataType::BigInt(_) | DataType::Int8(_) => FieldType::Bigint,
        DataType::Int(_) | DataType::Integer(_) | DataType::Int4(_) => FieldType::Int,
        DataType::BigIntUnsigned(_) | DataType::Int8Unsigned(_) => FieldType::UBigint,
        DataType::IntUnsigned(_) | DataType::IntegerUnsigned(_) | DataType::Int4Unsigned(_) => {
            FieldType::UInt
        }
        DataType::Double(_) | DataType::DoublePrecision | DataType::Float8 => FieldType::Double,
        DataType::Boolean | DataType::Bool => FieldType::Boolean,
        DataType::Timestamp(_, _) => FieldType::Timestamp,
        DataType::Float(_) | DataType::Real | DataType::Float4 => FieldType::Float,
        DataType::Bytea => FieldType::Bytea,
        DataType::JSON | DataType::JSONB => FieldType::Json,
        other => {
            return err(format!(
                "table '{table}' column '{name}': type {other} is not supported (TEXT, BIGINT, INT, BIGINT UNSIGNED, INT UNSIGNED, DOUBLE, FLOAT, BOOLEAN, TIMESTAMP, BYTEA, JSON, or an array of one of them: TEXT[])"
            ))
        }
    })
}

/// Column `c` of type `field_type` with its options (NOT NULL, METADATA FROM, ...).
fn column_options(
    table: &str,
    c: &ColumnDef,
    field_type: FieldType,
) -> Result<SourceField, SqlError> {
    let mut required = false;
    let mut metadata_key = None;
    let mut nullability = None;
    for opt in &c.options {
        if let Some(n) = &opt.name {
            return err(format!(
                "table '{table}' column '{}': CONSTRAINT {n} is not supported (write the option without a name)",
                c.name.value
            ));
        }
        let says = match &opt.option {
            ColumnOption::NotNull => Some(true),
            ColumnOption::Null => Some(false),
            _ => None,
        };
        if let (Some(a), Some(b)) = (nullability, says) {
            if a != b {
                return err(format!(
                    "table '{table}' column '{}': declared both NULL and NOT NULL",
                    c.name.value
                ));
            }
        }
        nullability = nullability.or(says);
        match &opt.option {
            // Collected by `primary_key`; a key column is NOT NULL.
            o if is_primary_option(o) => required = true,
            ColumnOption::NotNull => required = true,
            ColumnOption::Null => required = false,
            ColumnOption::DialectSpecific(tokens) => match tokens.last() {
                Some(Token::SingleQuotedString(k)) => metadata_key = Some(k.clone()),
                _ => {
                    return err(format!(
                        "table '{table}' column '{}': bad METADATA clause",
                        c.name.value
                    ))
                }
            },
            other => {
                return err(format!(
                    "table '{table}' column '{}': column option {other} is not supported",
                    c.name.value
                ))
            }
        }
    }
    Ok(SourceField {
        name: c.name.value.clone(),
        field_type,
        required,
        metadata_key,
    })
}

fn table_options(table: &str, opts: &[SqlOption]) -> Result<ConnectorOptions, SqlError> {
    let mut pairs = Vec::new();
    for o in opts {
        let SqlOption::KeyValue { key, value } = o else {
            return err(format!(
                "table '{table}': option {o} must be 'key' = 'value'"
            ));
        };
        let key = key.value.clone();
        let value = match value {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                Value::Number(n, _) => n.clone(),
                Value::Boolean(b) => b.to_string(),
                other => {
                    return err(format!(
                        "table '{table}': option '{key}' has unsupported value {other}"
                    ))
                }
            },
            Expr::Identifier(i) => i.value.clone(),
            other => {
                return err(format!(
                    "table '{table}': option '{key}' must be a literal, was {other}"
                ))
            }
        };
        if pairs.iter().any(|(k, _): &(String, String)| *k == key) {
            return err(format!("table '{table}': option '{key}' is given twice"));
        }
        pairs.push((key, value));
    }
    Ok(ConnectorOptions::new(pairs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_and_insert() {
        let p = parse_pipeline(
            "CREATE TABLE bids (auction BIGINT NOT NULL, price BIGINT, id TEXT METADATA FROM 'message-id')
               WITH ('connector' = 'pubsub', 'scan.parallel-pull-count' = 2, format = 'json');
             CREATE TABLE out (auction BIGINT, price BIGINT) WITH ('connector' = 'pubsub', 'topic' = 't');
             INSERT INTO out SELECT auction, price FROM bids;",
        )
        .unwrap();
        assert_eq!(p.tables.len(), 2);
        let bids = &p.tables[0];
        assert!(bids.fields[0].required);
        assert_eq!(bids.fields[2].metadata_key.as_deref(), Some("message-id"));
        assert_eq!(
            bids.options.keys(),
            vec!["connector", "format", "scan.parallel-pull-count"]
        );
        assert_eq!(p.inserts[0].sink, "out");
        assert_eq!(p.inserts[0].source, "bids");
        assert_eq!(
            p.inserts[0].query.to_string(),
            "SELECT auction, price FROM bids"
        );
    }

    #[test]
    fn syntax_error_points_at_line_and_column() {
        let e = parse_pipeline(
            "CREATE TABLE t (a BIGINT)\nWITH ('x' = 'y');\nINSERT INTO SELEC a FROM t;",
        )
        .unwrap_err();
        assert!(e.0.contains("Line: 3"), "{e}");
        assert!(e.0.contains("Column:"), "{e}");
    }

    #[test]
    fn lengths_and_precisions_that_would_not_be_enforced_are_refused() {
        for ty in ["VARCHAR(3)", "TIMESTAMP(3)", "TIMESTAMP WITH TIME ZONE"] {
            let e =
                parse_pipeline(&format!("CREATE TABLE t (a {ty}) WITH ('x' = 'y')")).unwrap_err();
            assert!(
                e.0.contains("column 'a'") && e.0.contains("is not supported"),
                "{ty}: {e}"
            );
        }
        for ty in [
            "VARCHAR",
            "TIMESTAMP",
            "TIMESTAMP(9)",
            "TIMESTAMP WITHOUT TIME ZONE",
            "TEXT",
        ] {
            parse_pipeline(&format!("CREATE TABLE t (a {ty}) WITH ('x' = 'y')")).unwrap();
        }
    }

    #[test]
    fn unsigned_integer_types_are_their_own_columns_and_narrower_ones_are_refused() {
        let p = parse_pipeline(
            "CREATE TABLE t (a BIGINT UNSIGNED, b INT UNSIGNED NOT NULL, c INTEGER UNSIGNED, d INT8 UNSIGNED) WITH ('x' = 'y')",
        )
        .unwrap();
        let types: Vec<FieldType> = p.tables[0].fields.iter().map(|f| f.field_type).collect();
        assert_eq!(
            types,
            [
                FieldType::UBigint,
                FieldType::UInt,
                FieldType::UInt,
                FieldType::UBigint
            ]
        );
        assert!(p.tables[0].fields[1].required);
        for (ty, says) in [
            ("TINYINT UNSIGNED", "INT UNSIGNED (0 to 4294967295)"),
            ("SMALLINT UNSIGNED", "INT UNSIGNED (0 to 4294967295)"),
            ("BIGINT(20) UNSIGNED", "display width"),
            ("INT(10) UNSIGNED", "display width"),
        ] {
            let e =
                parse_pipeline(&format!("CREATE TABLE t (a {ty}) WITH ('x' = 'y')")).unwrap_err();
            assert!(
                e.0.contains(&format!("column 'a': type {ty} is not supported"))
                    && e.0.contains(says),
                "{ty}: {e}"
            );
        }
    }

    #[test]
    fn unsupported_type_names_column() {
        let e = parse_pipeline("CREATE TABLE t (a BLOB) WITH ('x' = 'y')").unwrap_err();
        assert!(e.0.contains("column 'a'"), "{e}");
    }
}
