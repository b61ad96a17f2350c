//! Late rows into a table (issue 32, item 3; decision 0045): with `scan.late-rows.table`,
//! a row that arrives after its window fired is written to that table as it was read,
//! with its record id, and counted late; no window takes it, and every other row is in
//! exactly one window row.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use pubsub_connector_core::admin;

use crate::support::*;
use crate::windows::{publish, Event, BASE_MS};

const MS: i64 = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_after_their_window_fired_go_to_the_late_table_as_read() {
    let t = topics("late-rows", 10).await;
    let late_topic = unique("late-rows-late");
    let late_sub = unique("late-rows-late-sub");
    admin::create_topic(&profile(), &late_topic).await.unwrap();
    admin::create_subscription(&profile(), &late_sub, &late_topic, 60)
        .await
        .unwrap();
    let sql = format!(
        "CREATE TABLE clicks (page TEXT, v BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}', 'scan.event-time.attribute' = 'ts',
            'scan.watermark.out-of-orderness' = '1s', 'scan.watermark.idle-timeout' = '1s',
            'scan.late-rows.table' = 'late_clicks');
         CREATE TABLE late_clicks (v BIGINT, page TEXT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{late_topic}',
            'emulator-endpoint' = '{e}', 'sink.record-id-attribute' = 'rid');
         CREATE TABLE per_page (ws TIMESTAMP, page TEXT, n BIGINT, total BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{e}');
         INSERT INTO per_page
         SELECT window.start, page, n, total FROM (
            SELECT TUMBLE(INTERVAL '10' SECOND) AS window, page, count(*) AS n, sum(v) AS total
            FROM clicks GROUP BY window, page);",
        sub = t.input_sub,
        out = t.output,
        e = endpoint()
    );
    let w = Workdir::new(&sql);
    let child = w.spawn(&["--workers", "2", "--checkpoint-interval", "300ms"]);
    // 50 s of events on two pages, in order: windows [0, 10 s) .. [30 s, 40 s) fire at
    // the watermark 48 s.
    let on_time: Vec<Event> = (0..50)
        .map(|i| (format!("p{}", i % 2), i, BASE_MS + i * MS))
        .collect();
    publish(&t.input, &on_time).await;
    let fired = admin::drain_messages(
        &profile(),
        &t.output_sub,
        1,
        Some(8),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(fired.len(), 8, "the first four windows of both pages fire");
    // Rows for the window [0, 10 s), which fired: late, whichever split reads them.
    let late: Vec<Event> = (0..5)
        .map(|j| (format!("p{}", j % 2), 1_000 + j, BASE_MS + 2 * MS + j * 100))
        .collect();
    publish(&t.input, &late).await;
    let got = admin::drain_messages(&profile(), &late_sub, 1, Some(5), Duration::from_secs(60))
        .await
        .unwrap();
    signal(&child, "TERM");
    let (code, out, err) = finish(child, Duration::from_secs(60)).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(summary_count(&out, "rows late:"), 5, "{out}");
    // The late table's sinks have their window's watermark: the summary still gives one.
    assert!(
        summary_watermark_ms(&out).is_some_and(|ms| ms >= (BASE_MS + 40 * MS) as u64),
        "{out}"
    );

    // Written as read, in the late table's column order, each with its own record id.
    let rows: HashSet<(String, i64)> = got
        .iter()
        .map(|m| {
            let r: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
            assert_eq!(
                r.as_object().unwrap().keys().collect::<Vec<_>>(),
                ["page", "v"],
                "{r}"
            );
            (
                r["page"].as_str().unwrap().to_string(),
                r["v"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected: HashSet<(String, i64)> = late.iter().map(|(p, v, _)| (p.clone(), *v)).collect();
    assert_eq!(rows, expected);
    let ids: HashSet<&String> = got.iter().filter_map(|m| m.attributes.get("rid")).collect();
    assert_eq!(ids.len(), 5, "one record id per late row");

    // No window took a late row: the fired windows hold the on-time rows only.
    let mut windows: BTreeMap<(i64, String), (i64, i64)> = BTreeMap::new();
    for (page, v, t) in &on_time {
        let e = windows
            .entry((t.div_euclid(10 * MS) * 10 * MS, page.clone()))
            .or_default();
        e.0 += 1;
        e.1 += v;
    }
    let got: BTreeMap<(i64, String), (i64, i64)> = fired
        .iter()
        .map(|m| {
            let r: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
            let ws =
                pubsub_engine_format::parse_rfc3339(r["ws"].as_str().unwrap()).unwrap() / 1_000_000;
            (
                (ws, r["page"].as_str().unwrap().to_string()),
                (r["n"].as_i64().unwrap(), r["total"].as_i64().unwrap()),
            )
        })
        .collect();
    windows.retain(|(ws, _), _| *ws < BASE_MS + 40 * MS);
    assert_eq!(got, windows);
}
