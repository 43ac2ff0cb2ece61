-- Slow work (an experiment) runs as a job leased from here instead of a held
-- message: see internal/job. A job is named by the consumer that owns it, its
-- tenant and an id the caller chose (the experiment id), so a redelivered or
-- replayed request finds the row and never creates or re-runs the job.
-- +goose Up
CREATE TABLE IF NOT EXISTS jobs (
    tenant_id        text        NOT NULL,
    consumer         text        NOT NULL,
    id               text        NOT NULL,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL DEFAULT 'null',
    state            text        NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    -- Leases taken, crashes included; a retry after an outage or a graceful
    -- stop gives its lease back.
    attempts         integer     NOT NULL DEFAULT 0,
    -- The fencing token: incremented by every lease and never given back,
    -- so a worker whose lease was taken over can no longer write.
    lease_token      bigint      NOT NULL DEFAULT 0,
    lease_owner      text,
    -- Running: when the lease expires and another worker may take over.
    -- Queued: when the job becomes due (a retry's backoff).
    lease_until      timestamptz NOT NULL DEFAULT now(),
    cancel_requested boolean     NOT NULL DEFAULT false,
    cancel_reason    text,
    result           jsonb,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    PRIMARY KEY (tenant_id, consumer, id)
);
-- Leasing looks only at unfinished jobs, so finished ones cost the index
-- nothing however many accumulate.
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (consumer, lease_until)
    WHERE state IN ('queued', 'running');

-- A job's checkpoints: a step recorded here is never run again by a later
-- attempt of the same job.
CREATE TABLE IF NOT EXISTS job_steps (
    tenant_id text        NOT NULL,
    consumer  text        NOT NULL,
    job_id    text        NOT NULL,
    step      text        NOT NULL,
    output    jsonb       NOT NULL,
    attempt   integer     NOT NULL,
    done_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, consumer, job_id, step),
    FOREIGN KEY (tenant_id, consumer, job_id) REFERENCES jobs (tenant_id, consumer, id) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE IF EXISTS job_steps;
DROP TABLE IF EXISTS jobs;
