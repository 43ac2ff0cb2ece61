-- The degrader's state (internal/health).
--
-- health_facts holds every input the degrader accepted, reduced to what its
-- fold needs, keyed by event id (the first occurrence in the stream counts,
-- at its sequence: a republished copy stored first is moved to the
-- original's place when that arrives). The fold reads them in stream order
-- once every earlier event of the consumer is settled (its ack floor), so
-- the order in which copies store them never changes a decision.
--
-- health_tenants holds, per tenant, how far the fold has gone
-- (evaluated_through) and how far its transitions were published
-- (published_through, which a rebuild keeps: the rebuild publishes only
-- what live processing never did).
--
-- health_tools holds each tool's detector and state machine (detail, the
-- JSON of health.Tool) and the columns the timers and the CLI read.
-- +goose Up
CREATE TABLE IF NOT EXISTS health_facts (
    tenant_id   text        NOT NULL,
    event_id    text        NOT NULL,
    part        smallint    NOT NULL DEFAULT 0,  -- a call with its agent's rating gives two facts
    stream_seq  bigint      NOT NULL,
    kind        smallint    NOT NULL,
    tool_name   text        NOT NULL,
    bad         boolean     NOT NULL DEFAULT false,
    rating      double precision NOT NULL DEFAULT 0,
    at          timestamptz NOT NULL,
    due         timestamptz,
    reason      text        NOT NULL DEFAULT '',
    released_by text        NOT NULL DEFAULT '',
    event_type  text        NOT NULL,
    PRIMARY KEY (tenant_id, event_id, part)
);
CREATE INDEX IF NOT EXISTS health_facts_seq ON health_facts (tenant_id, stream_seq);

CREATE TABLE IF NOT EXISTS health_tenants (
    tenant_id         text   PRIMARY KEY,
    evaluated_through bigint NOT NULL DEFAULT 0,
    published_through bigint NOT NULL DEFAULT 0,
    stored_through    bigint NOT NULL DEFAULT 0,  -- the highest sequence stored: work is waiting when above evaluated_through
    known             integer NOT NULL DEFAULT 0,
    quarantined       integer NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS health_tools (
    tenant_id   text        NOT NULL,
    tool_name   text        NOT NULL,
    state       text        NOT NULL,
    version     bigint      NOT NULL,
    expires     timestamptz,
    held_back   boolean     NOT NULL DEFAULT false,
    quality     double precision NOT NULL,
    offences    integer     NOT NULL DEFAULT 0,
    since       timestamptz NOT NULL,
    reason      text        NOT NULL DEFAULT '',
    detail      jsonb       NOT NULL,
    PRIMARY KEY (tenant_id, tool_name)
);
CREATE INDEX IF NOT EXISTS health_tools_expires ON health_tools (expires) WHERE expires IS NOT NULL;
CREATE INDEX IF NOT EXISTS health_tools_held ON health_tools (tenant_id) WHERE held_back;

-- +goose Down
DROP TABLE IF EXISTS health_tools;
DROP TABLE IF EXISTS health_tenants;
DROP TABLE IF EXISTS health_facts;
