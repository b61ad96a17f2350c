-- The bids over 10.00 (price in cents) from subscription `bids-sub` into topic `bids-out`,
-- with the price as a decimal string, the channel upper-cased and the hour of the bid.
-- Runs on the quickstart's data: pubsub-connector quickstart --pipeline examples/filter.sql
-- (every bid is read and acknowledged; only those the WHERE keeps are written).
CREATE TABLE bids (
    auction BIGINT NOT NULL,
    bidder BIGINT NOT NULL,
    price BIGINT NOT NULL,
    channel TEXT,
    date_time BIGINT NOT NULL,
    message_id TEXT NOT NULL METADATA FROM 'message-id'
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'subscription' = 'bids-sub',
    'format' = 'json'
);

CREATE TABLE high_bids (
    auction BIGINT NOT NULL,
    price BIGINT NOT NULL,
    dollars TEXT,
    channel TEXT,
    hour TIMESTAMP,
    message_id TEXT NOT NULL
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'topic' = 'bids-out',
    'format' = 'json'
);

INSERT INTO high_bids
SELECT auction,
       price,
       concat(CAST(price / 100 AS TEXT), '.', lpad(CAST(price % 100 AS TEXT), 2, '0')) AS dollars,
       upper(channel) AS channel,
       date_trunc('hour', to_timestamp_millis(date_time)) AS hour,
       message_id
FROM bids
WHERE price > 1000 AND channel IS NOT NULL;
