package quality

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/internal/replay"
)

// Consumer runs the scorer with default options in an agentq process.
var Consumer = NewConsumer(Options{})

// NewConsumer returns the scorer as an app consumer with opts.
func NewConsumer(opts Options) app.Consumer {
	opts = opts.withDefaults()
	return app.Consumer{Name: opts.Consumer, Run: func(ctx context.Context, d *app.Deps) error {
		if err := database.EnsureFence(ctx, d.Pool, opts.Consumer); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting: not a failure
			}
			return err
		}
		s := NewScorer(d.Pool, d.Outbox, opts, d.Log)
		r, err := bus.NewRunner(d.JS, d.Schemas, s.Handle, d.Config.Runner(opts.Consumer, Subjects...), d.Log, d.Metrics)
		if err != nil {
			return err
		}
		return r.Run(ctx)
	}}
}

// RebuildTarget is the scorer as agentq replay rebuilds it: the same
// handler, publishing nothing.
func RebuildTarget(pool *pgxpool.Pool, opts Options, log zerolog.Logger) replay.Target {
	opts = opts.withDefaults()
	s := NewScorer(pool, outbox.Discard, opts, log)
	return replay.Target{
		Consumer: opts.Consumer,
		Subjects: Subjects,
		Reset: func(ctx context.Context, tx pgx.Tx, tenant string) error {
			return Reset(ctx, tx, opts.Consumer, tenant)
		},
		Handler: s.Handle,
	}
}
