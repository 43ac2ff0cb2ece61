package lab

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/replay"
)

// RebuildTarget is the lab as agentq replay rebuilds it: its read model of
// prompt versions and labels, from the stream. Experiments are not
// derived state — their trials are the model's answers — so a rebuild
// keeps them, and keeps the inbox rows of the requests and cancellations
// the lab decided: replay never runs an experiment again, and never
// decides a command again. A command no copy had decided yet is decided by
// the rebuild at its place in the history; its result waits in the outbox
// until the rebuild is complete. opts needs a model (opts.LLM) for
// requests to be accepted; the rebuild never calls it. Zero opts.Lab takes
// the AGENTQ_LAB_* defaults.
func RebuildTarget(pool *pgxpool.Pool, opts Options, log zerolog.Logger) (replay.Target, error) {
	opts = opts.withDefaults()
	if opts.Lab == (config.Lab{}) {
		cfg, err := config.Load(func(string) string { return "" })
		if err != nil {
			return replay.Target{}, err
		}
		opts.Lab = cfg.Lab
	}
	results := replay.NewResults(ResultSubjects...)
	l, err := New(pool, results, opts, log)
	if err != nil {
		return replay.Target{}, err
	}
	l.rebuild, l.published = true, results.Published
	return replay.Target{
		Consumer: opts.Consumer,
		Subjects: Subjects,
		Reset: func(ctx context.Context, tx pgx.Tx, tenant string) error {
			return Reset(ctx, tx, opts.Consumer, tenant)
		},
		Handler: l.HandleBatch,
		Results: results,
	}, nil
}

// Reset deletes the lab's read model of tenant ("" every tenant) and the
// inbox rows of the events it came from, inside tx; experiments and the
// decided commands' inbox rows stay.
func Reset(ctx context.Context, tx pgx.Tx, consumer, tenant string) error {
	for _, table := range []string{"lab_prompt_sources", "lab_prompt_results", "lab_prompt_versions", "lab_prompt_label_sets"} {
		if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE $1 = '' OR tenant_id = $1`, tenant); err != nil {
			return fmt.Errorf("reset %s: %w", table, err)
		}
	}
	if _, err := tx.Exec(ctx, `
		DELETE FROM inbox i WHERE i.consumer = $1 AND ($2 = '' OR i.tenant_id = $2)
		AND NOT EXISTS (SELECT 1 FROM lab_commands c WHERE c.tenant_id = i.tenant_id AND c.event_id = i.event_id)`,
		consumer, tenant); err != nil {
		return fmt.Errorf("reset inbox: %w", err)
	}
	return nil
}
