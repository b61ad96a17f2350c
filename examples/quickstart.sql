-- NEXMark bids from subscription `bids-sub` to topic `bids-out`, a few columns each.
-- `quickstart` fills in 'emulator-endpoint' for its local emulator.
CREATE TABLE bids (
    auction BIGINT NOT NULL,
    bidder BIGINT NOT NULL,
    price BIGINT,
    channel TEXT,
    date_time BIGINT,
    message_id TEXT NOT NULL METADATA FROM 'message-id'
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'subscription' = 'bids-sub',
    'format' = 'json',
    'scan.parallel-pull-count' = '4',
    'scan.flow-control.max-outstanding-element-count' = '50000'
);

CREATE TABLE bids_out (
    auction BIGINT,
    bidder BIGINT,
    price BIGINT,
    message_id TEXT
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'topic' = 'bids-out',
    'format' = 'json',
    'sink.batching.element-count-threshold' = '1000'
);

INSERT INTO bids_out SELECT auction, bidder, price, message_id FROM bids;
