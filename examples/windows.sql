-- Bids per auction per 10-second window of publish time, with the highest price, from
-- subscription `bids-sub` to topic `bids-out`: one row per auction and window, written
-- when the watermark passes the window's end. `quickstart --pipeline examples/windows.sql`
-- runs it with --drain (every window fires before the run ends) and checks that the
-- windows counted every bid once.
CREATE TABLE bids (
    auction BIGINT NOT NULL,
    price BIGINT
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'subscription' = 'bids-sub',
    'format' = 'json',
    'scan.parallel-pull-count' = '4',
    'scan.flow-control.max-outstanding-element-count' = '50000'
);

CREATE TABLE bids_out (
    window_start TIMESTAMP,
    window_end TIMESTAMP,
    auction BIGINT,
    bids BIGINT,
    max_price BIGINT
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'topic' = 'bids-out',
    'format' = 'json'
);

-- A view names the windowed aggregate (inlined where it is read, as Arroyo and Flink do).
CREATE VIEW per_auction AS
SELECT TUMBLE(INTERVAL '10' SECOND) AS window, auction,
       count(*) AS bids, max(price) AS max_price
FROM bids
GROUP BY window, auction;

INSERT INTO bids_out
SELECT window.start, window.end, auction, bids, max_price FROM per_auction;
