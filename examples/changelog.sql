-- Bids and the highest price per auction, kept up to date as bids arrive: an updating
-- aggregate (no window) writing a Debezium changelog to topic `bids-out`, each auction's
-- changes under its own ordering key. `quickstart --pipeline examples/changelog.sql`
-- runs it and checks that the last row of every auction counts its bids, and that they
-- sum to every bid published.
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

CREATE TABLE per_auction (
    auction BIGINT NOT NULL,
    bids BIGINT NOT NULL,
    max_price BIGINT,
    k TEXT METADATA FROM 'ordering-key'
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'topic' = 'bids-out',
    'format' = 'debezium_json',
    'sink.message-ordering.enabled' = 'true',
    'changelog.flush-interval' = '1s'
);

INSERT INTO per_auction
SELECT auction, count(*), max(price), CAST(auction AS TEXT) AS k
FROM bids
GROUP BY auction;
