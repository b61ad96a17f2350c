-- 1,000,000 NEXMark bids generated in-process, encoded as JSON and discarded: the engine
-- and the formats at full speed, no emulator needed. Ends by itself after 'event-count'
-- bids with a final checkpoint and the summary line (rows written, bytes encoded).
--   pubsub-connector run examples/nexmark-blackhole.sql --state-dir /tmp/nexmark-state
-- Columns are nexmark's field names. date_time is milliseconds since the Unix epoch:
-- read as TIMESTAMP through 'json.timestamp-format' = 'epoch-millis' (or declare BIGINT).
CREATE TABLE bids (
    auction BIGINT NOT NULL,
    bidder BIGINT NOT NULL,
    price BIGINT NOT NULL,
    channel TEXT,
    url TEXT,
    date_time TIMESTAMP NOT NULL,
    extra TEXT
) WITH (
    'connector' = 'nexmark',
    'event-type' = 'bid',
    'events-per-second' = '0',
    'event-count' = '1000000',
    'json.timestamp-format' = 'epoch-millis'
);

CREATE TABLE discard (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    channel TEXT,
    url TEXT,
    date_time TIMESTAMP,
    extra TEXT
) WITH (
    'connector' = 'blackhole',
    'format' = 'json'
);

INSERT INTO discard SELECT * FROM bids;
