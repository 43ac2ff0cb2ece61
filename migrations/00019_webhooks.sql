-- Alert webhooks (internal/webhook): which endpoint received which alert,
-- so a redelivered alert is not sent to an endpoint that already has it.
-- endpoint_id is the endpoint's host and a hash of its URL.
-- +goose Up
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    endpoint_id  text        NOT NULL,
    tenant_id    text        NOT NULL,
    event_id     text        NOT NULL,
    status       integer     NOT NULL,
    attempts     integer     NOT NULL,
    delivered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, event_id, endpoint_id)
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_at ON webhook_deliveries (delivered_at);

-- +goose Down
DROP TABLE IF EXISTS webhook_deliveries;
