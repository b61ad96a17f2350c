//! Memory tables (Arroyo's): `CREATE TABLE name (columns)` without `WITH (...)` names
//! the rows one INSERT writes into it, and every INSERT that reads it gets them as a
//! view would: the writing INSERT's query is inlined where the table is read, as a
//! subquery in FROM, converted to the declared columns in their order:
//!
//! ```sql
//! (SELECT CAST(c1 AS <type>) AS c1, ... FROM (<the INSERT's query>) AS name (c1, ...)) AS name
//! ```
//!
//! Nothing of it exists at run time. The file is parsed whole before the tables are
//! resolved, so the writing INSERT may come before or after the INSERTs reading it.
//! When the pipeline is planned ([`prepare`]) each column is checked against the
//! query's (the conversions a sink column takes, except into TEXT from another type:
//! write the CAST, whose format is DataFusion's), and a CAST that changes nothing is
//! taken out again, so that a memory table plans exactly as a view of the same query.
//!
//! Refused, with their position: a memory table without columns, `WATERMARK FOR` (its
//! rows keep the event time of the table its INSERT reads), `METADATA FROM` columns, a
//! second INSERT into it, one read but not written or written but not read, one that
//! reads itself, `UNION ALL` in its INSERT, and (as for a view) one whose query does not
//! aggregate: the windowed planner reads a subquery in FROM over an aggregate only.

use sqlparser::ast::{
    ArrayElemTypeDef, CastKind, DataType, ExactNumberInfo, Expr, Ident, Insert, Query, SelectItem,
    SetExpr, Spanned, Statement, TableAlias, TableAliasColumnDef, TableFactor, TimezoneInfo, Value,
};
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Location;

use super::clauses::{at, object_name, StatementTokens};
use super::dialect::PipelineDialect;
use super::error::SqlError;
use super::parse::{InsertDef, PipelineSql, TableDef};
use pubsub_engine_plan::PlannedTable;
use pubsub_engine_spi::{ConnectionType, FieldType, SourceField};

/// An INSERT statement of the file, kept until every table is known.
pub(crate) struct PendingInsert<'a> {
    pub ins: Insert,
    pub tokens: StatementTokens<'a>,
}

/// A resolved memory table: what its readers read, and what planning checks.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MemoryTable {
    pub name: String,
    /// The declared columns, in order.
    pub fields: Vec<SourceField>,
    /// The INSERT writing it (its column list, source and query, memory tables and views
    /// in it inlined).
    pub writer: InsertDef,
    /// Where the writing INSERT starts.
    pub writer_at: Location,
    /// The query readers read (inlined as `(definition) AS name`).
    pub definition: Query,
}

/// The memory tables declared so far.
#[derive(Default)]
pub(crate) struct MemoryTables {
    declared: Vec<(TableDef, Location)>,
}

/// The outcome of [`MemoryTables::resolve`]: the INSERTs that run, each memory table read
/// in it inlined, and the memory tables with the INSERT writing each (in an order where a
/// table comes after those its INSERT reads).
pub(crate) struct Resolved<'a> {
    pub readers: Vec<PendingInsert<'a>>,
    pub writers: Vec<(TableDef, PendingInsert<'a>, Query)>,
}

/// Whether a `CREATE TABLE` declares a memory table: it has no `WITH (...)`.
pub(crate) fn is_memory(ct: &sqlparser::ast::CreateTable) -> bool {
    matches!(ct.table_options, sqlparser::ast::CreateTableOptions::None)
}

impl MemoryTables {
    /// Whether `name` is a memory table declared so far.
    pub fn contains(&self, name: &str) -> bool {
        self.declared.iter().any(|(t, _)| t.name == name)
    }

    /// Names of the memory tables declared so far.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.declared.iter().map(|(t, _)| t.name.as_str())
    }

    /// Takes a `CREATE TABLE` without `WITH` (`st`: its tokens), its `WATERMARK FOR`
    /// already attached.
    ///
    /// Errors, with their position: no columns, `WATERMARK FOR`, a `METADATA FROM` column.
    pub fn create(&mut self, table: TableDef, st: &StatementTokens) -> Result<(), SqlError> {
        let what = format!("CREATE TABLE {}", table.name);
        if table.fields.is_empty() {
            return Err(at(
                st.start(),
                format!(
                    "{what}: a table without WITH (...) is a memory table (written by one INSERT, read like a view) and needs its columns: declare them, or add WITH ('connector' = ...) for a connector's table"
                ),
            ));
        }
        if let Some(w) = &table.watermark {
            return Err(at(
                w.at,
                format!(
                    "{what}: WATERMARK FOR is not supported on a memory table (a table without WITH (...)): its rows keep the event time of the table its INSERT reads; declare WATERMARK FOR on that table"
                ),
            ));
        }
        if let Some(f) = table.fields.iter().find(|f| f.metadata_key.is_some()) {
            return Err(at(
                st.start(),
                format!(
                    "{what}: column '{}': METADATA FROM reads a connector's messages, and a memory table (a table without WITH (...)) has none",
                    f.name
                ),
            ));
        }
        if !table.primary_key.is_empty() {
            return Err(at(
                st.find(Keyword::PRIMARY),
                format!(
                    "{what}: PRIMARY KEY is not supported on a memory table (a table without WITH (...)): it has the rows of its INSERT"
                ),
            ));
        }
        let start = st.start();
        self.declared.push((table, start));
        Ok(())
    }

    /// Resolves the memory tables against every INSERT of the file (in file order).
    ///
    /// Errors, with their position: a second INSERT into a memory table, a column list
    /// naming an undeclared column, twice the same one or leaving out a `NOT NULL` one,
    /// `UNION ALL` writing one, one read but not written (at the reader), written but not
    /// read, or neither (at its CREATE TABLE), one that reads itself (at its INSERT), and
    /// one whose query does not aggregate (at the reader, as for a view).
    pub fn resolve<'a>(&self, pending: Vec<PendingInsert<'a>>) -> Result<Resolved<'a>, SqlError> {
        if self.declared.is_empty() {
            return Ok(Resolved {
                readers: pending,
                writers: vec![],
            });
        }
        let index = |name: &str| self.declared.iter().position(|(t, _)| t.name == name);
        // The INSERT writing each.
        let mut writer: Vec<Option<usize>> = vec![None; self.declared.len()];
        for (i, p) in pending.iter().enumerate() {
            let Some(k) = index(&sink_of(&p.ins)) else {
                continue;
            };
            let (table, _) = &self.declared[k];
            let what = format!("INSERT INTO {}", table.name);
            if let Some(first) = writer[k] {
                let first = pending[first].tokens.start();
                return Err(at(
                    p.tokens.start(),
                    format!(
                        "{what}: memory table '{}' is already written by the INSERT at line {}, column {}: a memory table is written by exactly one INSERT",
                        table.name, first.line, first.column
                    ),
                ));
            }
            check_writer(table, p)?;
            writer[k] = Some(i);
        }
        // Where each is read: (pending index, position of the name).
        let reads: Vec<Vec<(usize, Location)>> = self
            .declared
            .iter()
            .map(|(t, _)| {
                let mut found = Vec::new();
                for (i, p) in pending.iter().enumerate() {
                    if let Some(q) = &p.ins.source {
                        let mut at = Vec::new();
                        reads_of(&q.body, &t.name, &mut at);
                        found.extend(at.into_iter().map(|l| (i, l)));
                    }
                }
                found
            })
            .collect();
        for (k, (t, created)) in self.declared.iter().enumerate() {
            let read = reads[k].iter().find(|(i, _)| Some(*i) != writer[k]);
            match (writer[k], read) {
                (None, Some((_, l))) => {
                    return Err(at(
                        *l,
                        format!(
                            "memory table '{0}' is read here, but no INSERT writes it (a table without WITH (...) is a memory table: write it with INSERT INTO {0} SELECT ..., or declare it WITH (...) to read a connector's table)",
                            t.name
                        ),
                    ))
                }
                (None, None) => {
                    return Err(at(
                        *created,
                        format!(
                            "CREATE TABLE {0}: memory table '{0}' (a table without WITH (...)) is neither written nor read: write it with INSERT INTO {0} SELECT ... and read it from another INSERT, or declare it WITH (...)",
                            t.name
                        ),
                    ))
                }
                (Some(w), None) => {
                    let w = pending[w].tokens.start();
                    return Err(at(
                        *created,
                        format!(
                            "CREATE TABLE {0}: memory table '{0}' (a table without WITH (...)) is written by the INSERT at line {1}, column {2} but read by none, so its rows would go nowhere: read it from an INSERT, or declare it WITH (...) to write a connector's table",
                            t.name, w.line, w.column
                        ),
                    ));
                }
                (Some(_), Some(_)) => {}
            }
        }

        // Definitions, each once those its INSERT reads are made.
        let writer_at: Vec<Location> = writer
            .iter()
            .map(|w| pending[w.expect("checked: written")].tokens.start())
            .collect();
        let mut windowed = vec![false; self.declared.len()];
        let mut defs: Vec<Option<Query>> = vec![None; self.declared.len()];
        let mut order = Vec::new();
        while order.len() < self.declared.len() {
            let ready = (0..self.declared.len()).find(|&k| {
                defs[k].is_none()
                    && (0..self.declared.len()).all(|j| {
                        defs[j].is_some() || !reads[j].iter().any(|(i, _)| Some(*i) == writer[k])
                    })
            });
            let Some(k) = ready else {
                let k = (0..self.declared.len())
                    .find(|&k| defs[k].is_none())
                    .expect("one is left");
                let w = writer[k].expect("every memory table has its writer");
                return Err(at(
                    pending[w].tokens.start(),
                    format!(
                        "INSERT INTO {0}: memory table '{0}' reads itself (through the memory tables its INSERT reads): a memory table is written from other tables",
                        self.declared[k].0.name
                    ),
                ));
            };
            let p = &pending[writer[k].expect("every memory table has its writer")];
            let mut query = p
                .ins
                .source
                .as_deref()
                .expect("check_insert: a query")
                .clone();
            self.inline(&mut query.body, &defs, &windowed, &writer_at)?;
            windowed[k] = super::aggregate::is_windowed(&query);
            let names = alias_names(&self.declared[k].0, &p.ins);
            defs[k] = Some(wrap(&self.declared[k].0, &names, query));
            order.push(k);
        }

        let mut readers = Vec::new();
        let mut writers: Vec<Option<(TableDef, PendingInsert<'a>, Query)>> =
            (0..self.declared.len()).map(|_| None).collect();
        let mut inlined = Vec::new();
        for (i, p) in pending.iter().enumerate() {
            let mut ins = p.ins.clone();
            if let Some(q) = ins.source.as_mut() {
                self.inline(&mut q.body, &defs, &windowed, &writer_at)?;
            }
            inlined.push((i, ins));
        }
        for ((i, ins), p) in inlined.into_iter().zip(pending) {
            let p = PendingInsert {
                ins,
                tokens: p.tokens,
            };
            match writer.iter().position(|w| *w == Some(i)) {
                Some(k) => {
                    let def = defs[k].clone().expect("made above");
                    writers[k] = Some((self.declared[k].0.clone(), p, def));
                }
                None => readers.push(p),
            }
        }
        Ok(Resolved {
            readers,
            writers: order
                .into_iter()
                .map(|k| {
                    writers[k]
                        .take()
                        .expect("every memory table has its writer")
                })
                .collect(),
        })
    }

    /// Replaces every memory table read in FROM within `body` by its definition, as
    /// `(definition) AS name`; `defs`: those made so far (all that `body` reads).
    fn inline(
        &self,
        body: &mut SetExpr,
        defs: &[Option<Query>],
        windowed: &[bool],
        writer_at: &[Location],
    ) -> Result<(), SqlError> {
        match body {
            SetExpr::Select(s) => {
                for t in &mut s.from {
                    self.inline_factor(&mut t.relation, defs, windowed, writer_at)?;
                }
                Ok(())
            }
            SetExpr::Query(q) => self.inline(&mut q.body, defs, windowed, writer_at),
            SetExpr::SetOperation { left, right, .. } => {
                self.inline(left, defs, windowed, writer_at)?;
                self.inline(right, defs, windowed, writer_at)
            }
            _ => Ok(()),
        }
    }

    fn inline_factor(
        &self,
        t: &mut TableFactor,
        defs: &[Option<Query>],
        windowed: &[bool],
        writer_at: &[Location],
    ) -> Result<(), SqlError> {
        match t {
            TableFactor::Table { name, alias, .. } => {
                let table = object_name(name);
                let Some(k) = self.declared.iter().position(|(t, _)| t.name == table) else {
                    return Ok(());
                };
                if !windowed[k] {
                    let l = writer_at[k];
                    return Err(at(
                        name.span().start,
                        format!(
                            "memory table '{table}' does not aggregate: the INSERT writing it (line {}, column {}) is a stateless SELECT, which a memory table (as a view) does not support yet; write that SELECT in the INSERT that reads it",
                            l.line, l.column
                        ),
                    ));
                }
                let def = defs[k].clone().expect("made before its readers");
                let alias = alias.clone().unwrap_or_else(|| TableAlias {
                    name: Ident::new(&table),
                    columns: vec![],
                });
                *t = TableFactor::Derived {
                    lateral: false,
                    subquery: Box::new(def),
                    alias: Some(alias),
                };
                Ok(())
            }
            TableFactor::Derived { subquery, .. } => {
                self.inline(&mut subquery.body, defs, windowed, writer_at)
            }
            _ => Ok(()),
        }
    }
}

/// The table an INSERT writes.
fn sink_of(ins: &Insert) -> String {
    match &ins.table {
        sqlparser::ast::TableObject::TableName(n) => object_name(n),
        other => other.to_string(),
    }
}

/// The INSERT writing `table`: one SELECT, and a column list (if any) of declared columns,
/// each once, leaving out no `NOT NULL` one.
fn check_writer(table: &TableDef, p: &PendingInsert) -> Result<(), SqlError> {
    let what = format!("INSERT INTO {}", table.name);
    if let Some(q) = &p.ins.source {
        if !matches!(q.body.as_ref(), SetExpr::Select(_)) {
            return Err(at(
                p.tokens.find(Keyword::UNION),
                format!(
                    "{what}: a memory table is written by one SELECT: UNION ALL is not supported into it (declare a memory table per SELECT)"
                ),
            ));
        }
    }
    if p.ins.columns.is_empty() {
        return Ok(());
    }
    for (i, c) in p.ins.columns.iter().enumerate() {
        if !table.fields.iter().any(|f| f.name == c.value) {
            return Err(at(
                c.span.start,
                format!(
                    "{what}: memory table '{}' has no column '{}' (it declares {})",
                    table.name,
                    c.value,
                    names_of(&table.fields)
                ),
            ));
        }
        if p.ins.columns[..i].iter().any(|d| d.value == c.value) {
            return Err(at(
                c.span.start,
                format!("{what}: the column list names '{}' twice", c.value),
            ));
        }
    }
    if let Some(f) = table
        .fields
        .iter()
        .find(|f| f.required && !p.ins.columns.iter().any(|c| c.value == f.name))
    {
        return Err(at(
            p.tokens.start(),
            format!(
                "{what}: the column list leaves out column '{}' of memory table '{}', which is NOT NULL",
                f.name, table.name
            ),
        ));
    }
    Ok(())
}

fn names_of(fields: &[SourceField]) -> String {
    fields
        .iter()
        .map(|f| f.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The positions where `body` reads table `name` in FROM (through subqueries).
fn reads_of(body: &SetExpr, name: &str, out: &mut Vec<Location>) {
    match body {
        SetExpr::Select(s) => {
            for t in &s.from {
                match &t.relation {
                    TableFactor::Table { name: n, .. } if object_name(n) == name => {
                        out.push(n.span().start)
                    }
                    TableFactor::Derived { subquery, .. } => reads_of(&subquery.body, name, out),
                    _ => {}
                }
            }
        }
        SetExpr::Query(q) => reads_of(&q.body, name, out),
        SetExpr::SetOperation { left, right, .. } => {
            reads_of(left, name, out);
            reads_of(right, name, out);
        }
        _ => {}
    }
}

/// The names the query's columns take, in its order: the INSERT's column list, else the
/// declared columns.
fn alias_names(table: &TableDef, ins: &Insert) -> Vec<String> {
    if ins.columns.is_empty() {
        table.fields.iter().map(|f| f.name.clone()).collect()
    } else {
        ins.columns.iter().map(|c| c.value.clone()).collect()
    }
}

/// The SQL type a CAST into a column of type `t` names; `None` for JSON (no SQL type:
/// a JSON column is filled by a JSON value alone, checked when planned).
fn cast_type(t: FieldType) -> Option<DataType> {
    Some(match t {
        FieldType::Text => DataType::Text,
        FieldType::Bigint => DataType::BigInt(None),
        FieldType::Int => DataType::Int(None),
        FieldType::UBigint => DataType::BigIntUnsigned(None),
        FieldType::UInt => DataType::IntUnsigned(None),
        FieldType::Double => DataType::Double(ExactNumberInfo::None),
        FieldType::Float => DataType::Real,
        FieldType::Boolean => DataType::Boolean,
        FieldType::Timestamp => DataType::Timestamp(None, TimezoneInfo::None),
        FieldType::Bytea => DataType::Bytea,
        FieldType::Json => return None,
        FieldType::Array(e) => DataType::Array(ArrayElemTypeDef::SquareBracket(
            Box::new(cast_type(e.field_type())?),
            None,
        )),
    })
}

/// `SELECT CAST(c AS <type>) AS c, ... FROM (query) AS name (names...)`: each declared
/// column from the query's column of its name in `names` (NULL when `names` leaves it
/// out), in declared order.
fn wrap(table: &TableDef, names: &[String], query: Query) -> Query {
    let mut statements = Parser::parse_sql(&PipelineDialect::default(), "SELECT c FROM t")
        .expect("a constant statement parses");
    let Some(Statement::Query(mut outer)) = statements.pop() else {
        unreachable!("a query");
    };
    let SetExpr::Select(select) = outer.body.as_mut() else {
        unreachable!("a SELECT");
    };
    select.projection = table
        .fields
        .iter()
        .map(|f| {
            let value = if names.contains(&f.name) {
                Expr::Identifier(Ident::new(&f.name))
            } else {
                Expr::Value(Value::Null.with_empty_span())
            };
            let expr = match cast_type(f.field_type) {
                Some(data_type) => Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(value),
                    data_type,
                    format: None,
                },
                None => value,
            };
            SelectItem::ExprWithAlias {
                expr,
                alias: Ident::new(&f.name),
            }
        })
        .collect();
    select.from[0].relation = TableFactor::Derived {
        lateral: false,
        subquery: Box::new(query),
        alias: Some(TableAlias {
            name: Ident::new(&table.name),
            columns: names.iter().map(TableAliasColumnDef::from_name).collect(),
        }),
    };
    *outer
}

/// A memory table's column of type `to` takes a query column of type `from`: the same
/// type, an exact conversion (integer widening, INT, INT UNSIGNED and FLOAT into DOUBLE,
/// JSON into TEXT) or an integer into a narrower one (checked: a value that does not fit
/// fails). Into TEXT from another type is refused: write the CAST (DataFusion's format).
fn fits(from: FieldType, to: FieldType) -> bool {
    let into_text = to == FieldType::Text && !matches!(from, FieldType::Text | FieldType::Json);
    (super::plan::is_exact_cast(from, to) && !into_text)
        || super::plan::is_checked_narrowing(from, to)
}

const FIT_RULE: &str = "a memory table's column takes the same type, an integer widened (INT -> BIGINT, INT UNSIGNED -> BIGINT or BIGINT UNSIGNED), INT, INT UNSIGNED or FLOAT -> DOUBLE, JSON -> TEXT, or an integer into a narrower one (checked: a value that does not fit fails); for another, write the CAST in the SELECT";

/// Checks each memory table's columns against the query writing it, planned over
/// `tables` (the pipeline's planned tables), and takes out the CASTs that change nothing
/// (and the whole conversion when it only renames a column to its own name), so that a
/// memory table plans as a view of its query. `None` when `sql` has no memory table.
///
/// Errors, at the writing INSERT: a number of columns other than declared (or listed), a
/// query column the declared type does not take (naming both types), a column that may
/// be NULL into a `NOT NULL` one, and every error planning the query has.
pub(crate) fn prepare(
    sql: &PipelineSql,
    tables: &[(String, PlannedTable)],
) -> Result<Option<PipelineSql>, SqlError> {
    // Each INSERT lists a table after those its query reads, so the first listing of each
    // keeps that order.
    let mut memory: Vec<MemoryTable> = Vec::new();
    for m in sql.inserts.iter().flat_map(|i| &i.memory) {
        if !memory.iter().any(|n| n.name == m.name) {
            memory.push(m.clone());
        }
    }
    if memory.is_empty() {
        return Ok(None);
    }
    let mut sources = tables.to_vec();
    for m in &memory {
        super::plan::give_event_time(&mut sources, &m.writer)?;
    }
    let mut out = sql.clone();
    for k in 0..memory.len() {
        let m = memory[k].clone();
        let fields = query_fields(&m, &sources)?;
        let simple = simplified(&m, &fields)?;
        if simple == m.definition {
            continue;
        }
        for ins in &mut out.inserts {
            replace(&mut ins.query.body, &m.definition, &simple);
        }
        for later in &mut memory[k + 1..] {
            replace(&mut later.writer.query.body, &m.definition, &simple);
            replace(&mut later.definition.body, &m.definition, &simple);
        }
    }
    Ok(Some(out))
}

/// The memory tables of `tables` (in their order) whose definition `query` reads.
pub(crate) fn read_by(query: &Query, tables: &[MemoryTable]) -> Vec<MemoryTable> {
    tables
        .iter()
        .filter(|m| reads_query(&query.body, &m.definition))
        .cloned()
        .collect()
}

/// Whether a subquery in FROM within `body` is `q`.
fn reads_query(body: &SetExpr, q: &Query) -> bool {
    match body {
        SetExpr::Select(s) => s.from.iter().any(|t| match &t.relation {
            TableFactor::Derived { subquery, .. } => {
                subquery.as_ref() == q || reads_query(&subquery.body, q)
            }
            _ => false,
        }),
        SetExpr::Query(inner) => reads_query(&inner.body, q),
        SetExpr::SetOperation { left, right, .. } => reads_query(left, q) || reads_query(right, q),
        _ => false,
    }
}

/// The columns the query writing `m` gives (name, type, nullability), in order.
fn query_fields(
    m: &MemoryTable,
    tables: &[(String, PlannedTable)],
) -> Result<Vec<SourceField>, SqlError> {
    let ins = &m.writer;
    let what = format!("INSERT INTO {}", m.name);
    let source = tables
        .iter()
        .find(|(n, _)| *n == ins.source)
        .map(|(_, p)| p)
        .ok_or_else(|| {
            SqlError(format!(
                "table '{}' is not defined (CREATE TABLE it first)",
                ins.source
            ))
        })?;
    if source.connection.connection_type != ConnectionType::Source {
        return Err(SqlError(format!(
            "table '{}' is a sink and cannot be read by SELECT",
            ins.source
        )));
    }
    let joined = ins
        .joined
        .as_ref()
        .and_then(|j| tables.iter().find(|(n, _)| n == j).map(|(_, p)| p));
    let select = super::derive::select_of(ins, source, joined, &what)?;
    Ok(select.fields)
}

/// `m`'s definition checked against the columns its query gives, without the CASTs
/// that change nothing; the query itself when what is left only names its columns as
/// they are named.
fn simplified(m: &MemoryTable, fields: &[SourceField]) -> Result<Query, SqlError> {
    let what = format!("INSERT INTO {}", m.name);
    let names: Vec<String> = match &m.writer.columns {
        Some(c) => c.clone(),
        None => m.fields.iter().map(|f| f.name.clone()).collect(),
    };
    if names.len() != fields.len() {
        let says = match &m.writer.columns {
            Some(_) => format!("its column list names {}", names.len()),
            None => format!(
                "memory table '{}' declares {} ({})",
                m.name,
                names.len(),
                names_of(&m.fields)
            ),
        };
        return Err(at(
            m.writer_at,
            format!(
                "{what}: the SELECT gives {} column{} ({}), and {says}",
                fields.len(),
                if fields.len() == 1 { "" } else { "s" },
                fields
                    .iter()
                    .map(|f| format!("{} {}", f.name, f.field_type.sql_name()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let mut same = Vec::new();
    for (j, (name, got)) in names.iter().zip(fields).enumerate() {
        let declared = m
            .fields
            .iter()
            .find(|f| f.name == *name)
            .expect("checked when parsed: a declared column");
        let (from, to) = (got.field_type, declared.field_type);
        if !fits(from, to) {
            return Err(at(
                m.writer_at,
                format!(
                    "{what}: column '{}' of memory table '{}' is {}, and the SELECT's item {} (`{}`) is {}: {FIT_RULE}",
                    declared.name,
                    m.name,
                    to.sql_name(),
                    j + 1,
                    got.name,
                    from.sql_name()
                ),
            ));
        }
        if declared.required && !got.required {
            return Err(at(
                m.writer_at,
                format!(
                    "{what}: column '{}' of memory table '{}' is NOT NULL, and the SELECT's item {} (`{}`) may be NULL (use COALESCE, or declare the column without NOT NULL)",
                    declared.name,
                    m.name,
                    j + 1,
                    got.name
                ),
            ));
        }
        if from == to {
            same.push(name.clone());
        }
    }
    let mut def = m.definition.clone();
    let SetExpr::Select(select) = def.body.as_mut() else {
        unreachable!("wrap makes a SELECT");
    };
    for item in &mut select.projection {
        let SelectItem::ExprWithAlias { expr, alias } = item else {
            continue;
        };
        if let Expr::Cast { expr: inner, .. } = expr {
            if matches!(inner.as_ref(), Expr::Identifier(i) if same.contains(&i.value)) {
                *item = SelectItem::UnnamedExpr(Expr::Identifier(alias.clone()));
            }
        } else if matches!(expr, Expr::Identifier(i) if i.value == alias.value) {
            *item = SelectItem::UnnamedExpr(Expr::Identifier(alias.clone()));
        }
    }
    let renames_only = select.projection.len() == names.len()
        && select.projection.iter().zip(&names).all(
            |(item, n)| matches!(item, SelectItem::UnnamedExpr(Expr::Identifier(i)) if i.value == *n),
        )
        && names.iter().zip(fields).all(|(n, f)| *n == f.name);
    if renames_only {
        return Ok(m.writer.query.as_ref().clone());
    }
    Ok(def)
}

/// Replaces each subquery in FROM equal to `old` within `body` by `new`.
fn replace(body: &mut SetExpr, old: &Query, new: &Query) {
    match body {
        SetExpr::Select(s) => {
            for t in &mut s.from {
                if let TableFactor::Derived { subquery, .. } = &mut t.relation {
                    if subquery.as_ref() == old {
                        **subquery = new.clone();
                    } else {
                        replace(&mut subquery.body, old, new);
                    }
                }
            }
        }
        SetExpr::Query(q) => replace(&mut q.body, old, new),
        SetExpr::SetOperation { left, right, .. } => {
            replace(left, old, new);
            replace(right, old, new);
        }
        _ => {}
    }
}
