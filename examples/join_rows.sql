-- A bidder raising their own bid: each bid joined with the higher bids of the same bidder
-- on the same auction within 10 minutes of it, as they arrive (an updating join of two tables' rows, issue
-- 48). Each side's rows are kept for the changelog's 'changelog.state-ttl' (10 minutes)
-- of event time (here publish time), and every pair is written once as a create into a
-- Debezium changelog. `quickstart --pipeline examples/join_rows.sql` runs it and checks
-- the pairs against the bids it published, and that every bid was acknowledged.
CREATE TABLE bids (
    auction BIGINT NOT NULL,
    bidder BIGINT NOT NULL,
    price BIGINT NOT NULL
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'subscription' = 'bids-sub',
    'format' = 'json'
);

CREATE TABLE raises WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'topic' = 'bids-out',
    'format' = 'debezium_json',
    'changelog.state-ttl' = '10m'
);

INSERT INTO raises
SELECT a.auction, a.bidder, a.price AS first_price, b.price AS raised_to
FROM bids a JOIN bids b ON a.auction = b.auction AND a.bidder = b.bidder
WHERE b.price > a.price;
