//! Arrow rows -> one payload per row.

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::DataType;

use crate::spi::Format;

/// Encodes each row of a batch as one message payload.
pub struct Serializer {
    format: Format,
}

impl Serializer {
    pub fn new(format: Format) -> Self {
        Serializer { format }
    }

    /// One payload per row, in row order. `json`: a JSON object of every column (NULL
    /// columns omitted). `raw_string`: the `value` column's text (NULL -> empty payload).
    /// Errors if the batch lacks what the format needs.
    pub fn serialize(&self, batch: &RecordBatch) -> anyhow::Result<Vec<Vec<u8>>> {
        match self.format {
            Format::Json => {
                let mut buf = Vec::with_capacity(batch.num_rows() * 64);
                {
                    let mut w = arrow_json::LineDelimitedWriter::new(&mut buf);
                    w.write(batch)?;
                    w.finish()?;
                }
                let mut out: Vec<Vec<u8>> = buf
                    .split(|b| *b == b'\n')
                    .map(|line| line.to_vec())
                    .collect();
                // The writer ends every row with a newline: drop the empty tail.
                out.truncate(batch.num_rows());
                anyhow::ensure!(
                    out.len() == batch.num_rows(),
                    "json writer produced {} lines for {} rows",
                    out.len(),
                    batch.num_rows()
                );
                Ok(out)
            }
            Format::RawBytes => anyhow::bail!("format 'raw_bytes' is not supported by this sink yet"),
            Format::RawString => {
                let col = batch.column_by_name("value").ok_or_else(|| {
                    anyhow::anyhow!("format 'raw_string' needs a column named 'value'")
                })?;
                anyhow::ensure!(
                    col.data_type() == &DataType::Utf8,
                    "format 'raw_string' needs column 'value' of type TEXT"
                );
                let s = col.as_string::<i32>();
                Ok((0..s.len())
                    .map(|i| {
                        if s.is_null(i) {
                            Vec::new()
                        } else {
                            s.value(i).as_bytes().to_vec()
                        }
                    })
                    .collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    #[test]
    fn json_one_payload_per_row() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let b = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a\nb"), None])),
            ],
        )
        .unwrap();
        let out = Serializer::new(Format::Json).serialize(&b).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(
            String::from_utf8(out[0].clone()).unwrap(),
            r#"{"id":1,"s":"a\nb"}"#
        );
        assert_eq!(String::from_utf8(out[1].clone()).unwrap(), r#"{"id":2}"#);
    }
}
