-- Each auction's bids per 10-second window of publish time, beside its high bids (a price
-- of 100,000 or more) in the same window: two windowed aggregates of one TUMBLE window,
-- joined on the window and the auction (issue 48). A LEFT JOIN writes every auction of
-- the window, with NULL high bids where it had none. `quickstart --pipeline
-- examples/join.sql` runs it with --drain and checks that the windows counted every bid
-- once.
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
    high_bids BIGINT,
    top_price BIGINT
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'topic' = 'bids-out',
    'format' = 'json'
);

INSERT INTO bids_out
SELECT a.window.start, a.window.end, a.auction, a.bids, h.high_bids, h.top_price
FROM (SELECT TUMBLE(INTERVAL '10' SECOND) AS window, auction, count(*) AS bids
      FROM bids GROUP BY window, auction) a
LEFT JOIN (SELECT TUMBLE(INTERVAL '10' SECOND) AS window, auction, count(*) AS high_bids,
                  max(price) AS top_price
           FROM bids WHERE price >= 100000 GROUP BY window, auction) h
ON a.window = h.window AND a.auction = h.auction;
