package quality

import (
	"context"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
)

// Consumer runs the scorer with default options in an agentq process.
var Consumer = NewConsumer(Options{})

// NewConsumer returns the scorer as an app consumer with opts.
func NewConsumer(opts Options) app.Consumer {
	opts = opts.withDefaults()
	return app.Consumer{Name: opts.Consumer, Run: func(ctx context.Context, d *app.Deps) error {
		s := NewScorer(d.Pool, d.Outbox, opts, d.Log)
		r, err := bus.NewRunner(d.JS, d.Schemas, s.Handle, d.Config.Runner(opts.Consumer, Subjects...), d.Log, d.Metrics)
		if err != nil {
			return err
		}
		return r.Run(ctx)
	}}
}
