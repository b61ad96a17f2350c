-- One row per step of each successful build, from Cloud Build notifications (the
-- messages Cloud Build publishes to its `cloud-builds` topic) on subscription
-- `builds-sub`, to topic `bids-out` (issue 48): `steps` is a JSON array of objects,
-- declared JSON[], and UNNEST gives each of its elements a row.
-- `quickstart --pipeline examples/unnest.sql` publishes the builds and checks the rows.
CREATE TABLE builds (
    id TEXT NOT NULL,
    status TEXT,
    tags TEXT[],
    steps JSON[]
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'subscription' = 'builds-sub',
    'format' = 'json'
);

CREATE TABLE build_steps (
    build_id TEXT NOT NULL,
    step TEXT,
    step_status TEXT,
    image TEXT
) WITH (
    'connector' = 'pubsub',
    'project' = 'quickstart',
    'topic' = 'bids-out',
    'format' = 'json'
);

INSERT INTO build_steps
SELECT id AS build_id,
       json_get_str(UNNEST(steps), 'id') AS step,
       json_get_str(UNNEST(steps), 'status') AS step_status,
       json_get_str(UNNEST(steps), 'args', 2) AS image
FROM builds
WHERE status = 'SUCCESS';
