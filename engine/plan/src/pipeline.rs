//! A planned pipeline: its tables bound to connectors and its queries, each a SELECT
//! (and a window stage) the runtime runs on the rows of its source.

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::SchemaRef;
use pubsub_engine_spi::{Connection, ErasedConnector, FieldType, OperatorConfig};

use crate::select::SelectPlan;

/// A table bound to its connector.
#[derive(Clone)]
pub struct PlannedTable {
    pub connector: Arc<dyn ErasedConnector>,
    pub connection: Connection,
    /// A source table's `scan.late-rows.table`: the sink table its rows go to when they
    /// arrive late at a window, instead of being dropped.
    pub late_rows: Option<String>,
    /// A changelog table (format `debezium_json`): how the updating queries writing it
    /// flush their changes and how long they keep an idle group.
    pub changelog: Option<ChangelogOptions>,
    /// `PRIMARY KEY (...)`: the columns identifying a changelog source's rows (empty for
    /// any other table).
    pub primary_key: Vec<String>,
}

/// A changelog sink table's options for the updating aggregates writing it (issue 47,
/// decision 0051).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangelogOptions {
    /// `changelog.flush-interval`: how often the groups that changed write their change
    /// (processing time; default 1 s, Arroyo's).
    pub flush_interval: std::time::Duration,
    /// `changelog.state-ttl`: a group no row reached for this long is forgotten
    /// (processing time; default 24 h, Arroyo's `updating_ttl`); an updating join keeps
    /// each side's rows this long in event time (decision 0056).
    pub state_ttl: std::time::Duration,
}

impl Default for ChangelogOptions {
    fn default() -> Self {
        ChangelogOptions {
            flush_interval: std::time::Duration::from_secs(1),
            state_ttl: std::time::Duration::from_secs(24 * 3600),
        }
    }
}

impl PlannedTable {
    /// The operator config for one subtask of this table.
    pub fn operator_config(&self) -> OperatorConfig {
        let s = &self.connection.schema;
        OperatorConfig {
            format: s.format,
            bad_data: s.bad_data,
            schema: s.clone(),
            metadata_fields: s.metadata_fields(),
            drop_replays: false,
            dedup_in_dataflow: false,
        }
    }
}

/// One `INSERT INTO sink SELECT ... FROM source`.
#[derive(Clone)]
pub struct PlannedQuery {
    /// `q{index}`, stable across restarts of the same pipeline file.
    pub id: String,
    /// The statement as written, for errors (`INSERT INTO out SELECT ... FROM src`).
    pub text: String,
    pub source: PlannedTable,
    pub sink: PlannedTable,
    /// The SELECT: WHERE condition and select list, evaluated on each source batch.
    pub select: Arc<SelectPlan>,
    /// For each sink column in sink order: the select item feeding it, or `None` when
    /// the INSERT's column list leaves it out (a nullable column, filled with NULL).
    pub projection: Vec<Option<usize>>,
    pub sink_schema: SchemaRef,
    /// Index in `sink_schema` of the column rows are routed by (the sink connector's
    /// [`sink_key`](pubsub_engine_spi::Connector::sink_key)), so that one value is written by one
    /// subtask; `None`: rows stay on their worker.
    pub route_by: Option<usize>,
    /// A windowed aggregate: the stages before and in the window; `select` is then what
    /// runs on the rows a window writes when it fires (planned by the SQL front end).
    pub window: Option<Arc<crate::window::WindowPlan>>,
    /// The job running the query, set by [`PlannedPipeline::bind_job`] before it runs: it
    /// enters every record id the query stamps ([`pubsub_engine_spi::record_id::RecordProducer`]).
    pub job: Option<String>,
    /// A windowed query over a table with `scan.late-rows.table`: the query writing its
    /// late rows (also in [`PlannedPipeline::queries`]), which `project`s them as read.
    pub late: Option<Arc<PlannedQuery>>,
    /// The query writing the late rows of windowed query `late_of`: fed by that query's
    /// window, never by the source directly.
    pub late_of: Option<String>,
    /// A join (windowed, or an updating join of two tables' rows): its left side reads `source`, its right side
    /// [`JoinPlan::right_source`](crate::join::JoinPlan::right_source); `select` runs on
    /// the joined rows. `window` is then `None`.
    pub join: Option<Arc<crate::join::JoinPlan>>,
}

impl PlannedQuery {
    /// What runs on each source batch: the window's first stage, else the whole SELECT
    /// (the source's row checks run it, issue 17).
    pub fn source_stage(&self) -> Arc<SelectPlan> {
        if let Some(j) = &self.join {
            return j.sides[0].window.before.clone();
        }
        match &self.window {
            Some(w) => w.before.clone(),
            None => self.select.clone(),
        }
    }

    /// Every table it reads (a join's two), then its sink.
    pub fn tables(&self) -> Vec<&PlannedTable> {
        let mut out: Vec<&PlannedTable> = self.reads().into_iter().map(|(t, _)| t).collect();
        out.push(&self.sink);
        out
    }

    /// The tables it reads with what runs on each one's batches ([`source_stage`](Self::source_stage)
    /// for its `source`; a join's right side's first stage for the right table).
    pub fn reads(&self) -> Vec<(&PlannedTable, Arc<SelectPlan>)> {
        let mut out = vec![(&self.source, self.source_stage())];
        if let Some(j) = &self.join {
            out.push((&j.right_source, j.sides[1].window.before.clone()));
        }
        out
    }

    /// Filters and computes source rows (the SELECT), then casts and renames them into the
    /// sink's schema. The planner allowed only casts that cannot fail or change a value.
    ///
    /// Errors: a row failure (a [`RowFailure`](super::RowFailure), marked permanent: a
    /// replay would fail the same way), naming the row's message and the expression.
    ///
    /// The rows of a changelog source (format `debezium_json`) give the changes they make
    /// to the rows the SELECT writes, in the changelog layout (see [`crate::changelog`]).
    pub fn project(&self, batch: &RecordBatch) -> anyhow::Result<RecordBatch> {
        let fail = |f: crate::RowFailure| {
            pubsub_engine_spi::PermanentError::wrap(
                anyhow::Error::new(f).context(format!("{}: row failure", self.text)),
            )
        };
        if self.reads_changes() && crate::changelog::is_changes(batch) {
            let declared =
                self.sink_schema.fields().len() - usize::from(self.select.carry.is_some());
            return crate::changelog::project_changes(
                &self.select,
                batch,
                declared,
                &|rows| self.to_sink(rows),
                &fail,
            );
        }
        let batch = &self.select.evaluate(batch).map_err(fail)?;
        self.to_sink(batch)
    }

    /// The select list's rows (`batch`, with the carried record key) cast and renamed into
    /// the sink's schema.
    fn to_sink(&self, batch: &RecordBatch) -> anyhow::Result<RecordBatch> {
        let columns = self
            .projection
            .iter()
            .zip(self.sink_schema.fields())
            .enumerate()
            .map(|(j, (i, f))| {
                let Some(i) = i else {
                    return Ok(new_null_array(f.data_type(), batch.num_rows()));
                };
                let c = batch.column(*i);
                let from = self.select.fields[*i].field_type;
                let to = self.sink.connection.schema.fields[j].field_type;
                if to == FieldType::Text && from != FieldType::Text {
                    if let Some(text) = pubsub_engine_format::to_text(c, from) {
                        return Ok(text);
                    }
                }
                if c.data_type() == f.data_type() {
                    Ok(c.clone())
                } else {
                    // Never turn a value that does not convert into NULL.
                    let opts = CastOptions {
                        safe: false,
                        ..CastOptions::default()
                    };
                    cast_with_options(c, f.data_type(), &opts).map_err(anyhow::Error::from)
                }
            })
            .collect::<anyhow::Result<Vec<ArrayRef>>>()?;
        let mut columns = columns;
        if self.select.carry.is_some() {
            columns.push(self.record_ids(batch)?);
        }
        let opts = arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        RecordBatch::try_new_with_options(self.sink_schema.clone(), columns, &opts).map_err(|e| {
            anyhow::anyhow!(
                "rows for '{}' do not fit its columns: {e}",
                self.sink.connection.name
            )
        })
    }
}

impl PlannedQuery {
    /// Whether its source is a changelog (format `debezium_json`): its rows are changes.
    pub fn reads_changes(&self) -> bool {
        self.source.connection.connection_type == pubsub_engine_spi::ConnectionType::Source
            && self.source.connection.schema.format == pubsub_engine_spi::Format::DebeziumJson
    }

    /// Whether this is an updating aggregate (writing a changelog).
    pub fn is_updating(&self) -> bool {
        self.window.as_ref().is_some_and(|w| w.window_at.is_none())
    }

    /// An updating aggregate's rows (`batch`, in its output schema) as sink rows (in
    /// `sink_schema`, the declared columns: the changelog's `before` and `after`): whether
    /// each passes its HAVING / outer WHERE (every row when `having` is false), and the
    /// sink rows of those that do, in order.
    ///
    /// Errors: as [`project`](Self::project)'s.
    pub fn sink_rows(
        &self,
        batch: &RecordBatch,
        having: bool,
    ) -> anyhow::Result<(Vec<bool>, RecordBatch)> {
        let having = match having {
            true => self.window.as_ref().and_then(|w| w.having.as_ref()),
            false => None,
        };
        let kept: Vec<bool> = match having {
            None => vec![true; batch.num_rows()],
            Some((f, text)) => {
                let v = f
                    .evaluate(batch)
                    .and_then(|v| v.into_array(batch.num_rows()))
                    .map_err(|e| anyhow::anyhow!("{}: {text}: {e}", self.text))?;
                let b = v
                    .as_boolean_opt()
                    .ok_or_else(|| anyhow::anyhow!("{}: {text} is not a condition", self.text))?;
                (0..b.len()).map(|i| b.is_valid(i) && b.value(i)).collect()
            }
        };
        let passing = match having {
            None => batch.clone(),
            Some(_) => arrow::compute::filter_record_batch(
                batch,
                &arrow::array::BooleanArray::from(kept.clone()),
            )?,
        };
        // An updating query's `sink_schema` has no record id column (its changes get
        // theirs from `changes_for_sink`): these are the sink's declared columns.
        Ok((kept, self.project(&passing)?))
    }

    /// An updating aggregate's changes as the sink takes them: with each change's record
    /// id (from its record key) when the sink stamps them.
    pub fn changes_for_sink(&self, changes: crate::window::Changes) -> anyhow::Result<RecordBatch> {
        let Some(keys) = changes.record_keys else {
            return Ok(changes.batch);
        };
        let keys: arrow::array::ArrayRef = Arc::new(arrow::array::StringArray::from(keys));
        let ids = self.record_ids_of(&keys)?;
        let mut fields: Vec<_> = changes.batch.schema().fields().iter().cloned().collect();
        fields.push(Arc::new(arrow::datatypes::Field::new(
            pubsub_engine_spi::record_id::RECORD_ID_COLUMN,
            arrow::datatypes::DataType::Utf8,
            false,
        )));
        let mut columns = changes.batch.columns().to_vec();
        columns.push(ids);
        Ok(RecordBatch::try_new(
            Arc::new(arrow::datatypes::Schema::new(fields)),
            columns,
        )?)
    }

    /// The record id of each row (see [`pubsub_engine_spi::record_id`]) from the record keys the
    /// SELECT carried as the last column of `selected`.
    fn record_ids(&self, selected: &RecordBatch) -> anyhow::Result<ArrayRef> {
        let keys = selected
            .columns()
            .last()
            .ok_or_else(|| anyhow::anyhow!("{}: the rows carry no record key", self.text))?;
        self.record_ids_of(keys)
    }

    /// The record id of each record key of `keys` (TEXT, never NULL).
    fn record_ids_of(&self, keys: &ArrayRef) -> anyhow::Result<ArrayRef> {
        let keys = keys
            .as_string_opt::<i32>()
            .ok_or_else(|| anyhow::anyhow!("{}: the rows carry no record key", self.text))?;
        if keys.null_count() > 0 {
            anyhow::bail!("{}: a row has no record key", self.text);
        }
        let Some(job) = &self.job else {
            anyhow::bail!(
                "{}: record ids need the job id (PlannedPipeline::bind_job)",
                self.text
            );
        };
        let producer = pubsub_engine_spi::record_id::RecordProducer {
            job: job.clone(),
            sink: self.sink.connection.name.clone(),
            query: self.id.clone(),
            statement: self.text.clone(),
        };
        let ids: arrow::array::StringArray = keys
            .iter()
            .map(|k| k.map(|k| pubsub_engine_spi::record_id::record_id(&producer, k)))
            .collect();
        Ok(Arc::new(ids))
    }
}

/// A validated pipeline: every query with its two tables. Several queries may read one
/// source table: it is read once and its rows reach every one of them.
#[derive(Clone)]
pub struct PlannedPipeline {
    pub queries: Vec<PlannedQuery>,
}

impl PlannedPipeline {
    /// Names the job that runs every query: it enters their record ids, so two jobs never
    /// stamp one id (see [`pubsub_engine_spi::record_id`]). The runtime binds `RuntimeConfig::job_id`
    /// at start; errors: an id [`check_job_id`](pubsub_engine_spi::record_id::check_job_id) refuses.
    pub fn bind_job(&mut self, job: &str) -> anyhow::Result<()> {
        pubsub_engine_spi::record_id::check_job_id(job).map_err(anyhow::Error::msg)?;
        for q in &mut self.queries {
            q.job = Some(job.to_string());
            if let Some(late) = &mut q.late {
                Arc::make_mut(late).job = Some(job.to_string());
            }
        }
        Ok(())
    }

    /// The distinct source tables, in order of first use, each with the indexes of the
    /// queries that read it.
    pub fn sources(&self) -> Vec<(PlannedTable, Vec<usize>)> {
        let mut out: Vec<(PlannedTable, Vec<usize>)> = Vec::new();
        for (i, q) in self.queries.iter().enumerate() {
            for (table, _) in q.reads() {
                match out
                    .iter_mut()
                    .find(|(t, _)| t.connection.name == table.connection.name)
                {
                    // A self-join reads its table once.
                    Some((_, qs)) if qs.last() == Some(&i) => {}
                    Some((_, qs)) => qs.push(i),
                    None => out.push((table.clone(), vec![i])),
                }
            }
        }
        out
    }
}
