-- Exactly-once effect: a consumer records every event it applied here, in
-- the same transaction as the effect, and acks only after commit.
-- +goose Up
CREATE TABLE IF NOT EXISTS inbox (
    consumer     text        NOT NULL,
    tenant_id    text        NOT NULL,
    event_id     text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, tenant_id, event_id)
);

-- Results are written here in the effect's transaction and published after
-- commit; a row left behind by a crash is published by the relay.
CREATE TABLE IF NOT EXISTS outbox (
    id         text        PRIMARY KEY,
    tenant_id  text        NOT NULL,
    event_type text        NOT NULL,
    event      bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS outbox_created_at ON outbox (created_at);

-- +goose Down
DROP TABLE IF EXISTS outbox;
DROP TABLE IF EXISTS inbox;
