-- The three auctions with the most bids in each 10-second window of publish time, from
-- subscription `bids-sub` to topic `bids-out` (issue 48): ROW_NUMBER over each window's
-- rows when it fires, ties broken by auction. `quickstart --pipeline examples/top_n.sql`
-- runs it with --drain and checks each window's ranking.
CREATE TABLE bids (
    auction BIGINT NOT NULL,
    price BIGINT
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'subscription' = 'bids-sub',
    'format' = 'json'
);

CREATE TABLE bids_out (
    window_start TIMESTAMP,
    window_end TIMESTAMP,
    auction BIGINT,
    bids BIGINT,
    row_num BIGINT UNSIGNED
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'topic' = 'bids-out',
    'format' = 'json'
);

INSERT INTO bids_out
SELECT window.start, window.end, auction, bids, row_num FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY window ORDER BY bids DESC) AS row_num
    FROM (SELECT TUMBLE(INTERVAL '10' SECOND) AS window, auction, count(*) AS bids
          FROM bids GROUP BY window, auction)
) WHERE row_num <= 3;
