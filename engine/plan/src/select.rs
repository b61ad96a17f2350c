//! One planned `SELECT <expressions> FROM source [WHERE <condition>]`: the physical
//! filter and projection DataFusion planned (SPEC 8, decision 0023), evaluated on each
//! Arrow batch ([`eval`](crate::eval)). The SQL front end plans it (its `select.rs`).

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion_physical_expr::PhysicalExpr;
use pubsub_engine_spi::SourceField;

/// A planned SELECT: what each batch of the source goes through.
pub struct SelectPlan {
    /// The WHERE condition and its SQL text; rows where it is not true are dropped.
    pub filter: Option<(Arc<dyn PhysicalExpr>, String)>,
    /// One expression per output column, with its SQL text.
    pub exprs: Vec<(Arc<dyn PhysicalExpr>, String)>,
    /// The output columns: name, SQL type (every expression's type maps to one), whether
    /// it may be NULL, and the metadata key of a bare source metadata column.
    pub fields: Vec<SourceField>,
    /// `fields` as Arrow: the schema of the rows this plan outputs.
    pub schema: SchemaRef,
    /// Index in the source rows of the `message-id` metadata column, if the table declares
    /// one: a failing row is named by it.
    pub message_id: Option<usize>,
    /// Per output column: true for an untyped `NULL` (its `fields` type is TEXT), which
    /// fits any column that may be NULL.
    pub untyped_null: Vec<bool>,
    /// Index in the source rows of the hidden record key column, carried (filtered like
    /// every row) after the output columns, and the schema with it: set when the query's
    /// sink stamps record ids (see [`pubsub_engine_spi::record_id`]).
    pub carry: Option<(usize, SchemaRef)>,
    /// Every column of the kept source rows follows the output (and the carried key):
    /// set on a window's first stage when its table writes late rows to a table
    /// (`scan.late-rows.table`), so that a late row can be written as read.
    pub keep_source: bool,
    /// `UNNEST(list)` in the select list: `exprs` then read the rows it expands, and the
    /// carried record key gets each element's position (see [`crate::unnest`]).
    pub unnest: Option<Arc<crate::unnest::UnnestPlan>>,
}

impl std::fmt::Debug for SelectPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelectPlan")
            .field("filter", &self.filter.as_ref().map(|(_, s)| s))
            .field(
                "exprs",
                &self.exprs.iter().map(|(_, s)| s).collect::<Vec<_>>(),
            )
            .field("fields", &self.fields)
            .finish()
    }
}
