package lab

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/chat"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/internal/provider"
)

// Event types the lab consumes and publishes.
var (
	TypeRequested = bus.Type("experiment", "requested")
	TypeCancelled = bus.Type("experiment", "cancelled")
	TypeStarted   = bus.Type("experiment", "started")
	TypeCompleted = bus.Type("experiment", "completed")
	TypeFailed    = bus.Type("experiment", "failed")
	TypeRejected  = bus.Type("lab", "rejected")

	typePromptCreated   = bus.Type("prompt", "created")
	typePromptIndexed   = bus.Type("prompt", "indexed")
	typePromptActivated = bus.Type("prompt", "activated")
	typeIndexerRejected = bus.Type("indexer", "rejected")
	typeFeedback        = bus.Type("feedback", "submitted")
	typePromptUsed      = bus.Type("prompt", "used")
)

// Subjects are the lab's filter subjects: its commands, and the prompt and
// feedback events of its read models (the indexer's results among them).
var Subjects = []string{"experiment.requested.*", "experiment.cancelled.*", "prompt.created.*", "prompt.indexed.*",
	"indexer.rejected.*", "feedback.submitted.*", "prompt.used.*"}

// ResultSubjects are the subjects of the lab's results.
var ResultSubjects = []string{"experiment.started.*", "experiment.completed.*", "experiment.failed.*", "lab.rejected.*"}

// defaultHeartbeat is how often a running experiment renews its lease and
// looks for a cancellation, unless Options.Job says otherwise.
const defaultHeartbeat = time.Second

// jobKind is the kind of the lab's jobs.
const jobKind = "experiment"

// Options configures a Lab.
type Options struct {
	// Consumer names the durable consumer, the inbox and the jobs.
	// Default "lab".
	Consumer string
	// Lab holds the AGENTQ_LAB_* settings, taken as they are: load them
	// with config.Load, which supplies the defaults.
	Lab config.Lab
	// LLM runs the trials, the judge and the summary; nil means no model
	// is configured, and every experiment is refused.
	LLM Completer
	// Model is the model a request that names none runs with
	// (AGENTQ_LLM_MODEL).
	Model string
	// PromptWait is how long a request naming a prompt or version the
	// lab has not seen indexed waits for it (an agent that creates a
	// version and asks for an experiment at once races the indexer),
	// measured from the request's time in the stream. Default 10s.
	PromptWait time.Duration
	// Job sets the timing of the lab's job worker: Lease, Heartbeat, Poll,
	// Grace, MaxAttempts, Backoff. Zero fields take internal/job's
	// defaults, but for Heartbeat: 1s, so a cancellation stops a running
	// experiment within about a second. The lab sets the rest.
	Job job.Options
	// Registerer receives the job worker's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

func (o Options) withDefaults() Options {
	if o.Consumer == "" {
		o.Consumer = "lab"
	}
	if o.PromptWait <= 0 {
		o.PromptWait = 10 * time.Second
	}
	return o
}

// Sender stores results in a transaction (Queue, in the effect's batch)
// and publishes them after commit (Send); *outbox.Outbox satisfies it, and
// a rebuild's *replay.Results.
type Sender interface {
	Queue(b *pgx.Batch, evs ...event.Event) error
	Send(ctx context.Context, evs []event.Event) error
}

var _ Sender = (*outbox.Outbox)(nil)

// Lab accepts experiments from the stream and runs them as jobs.
type Lab struct {
	pool    *pgxpool.Pool
	out     Sender
	opts    Options
	llm     Completer
	limit   limiter
	builder *chat.Builder
	log     zerolog.Logger
	worker  *job.Worker
	// ending holds the result OnDone stored for a job, for AfterDone to
	// send once it has committed.
	ending sync.Map // job.Key -> event.Event
	// indexed is signalled when a prompt.indexed is applied.
	indexed signal
	// rebuild marks the lab of a rebuild (RebuildTarget): it decides a
	// request at its place in the history, never deferring it.
	rebuild bool
	// prune times the deletion of the feedback and prompt.used rows past
	// the retention.
	prune pruner
	// published, in a rebuild, reports whether a result id was on the
	// stream when it began (see answered).
	published func(id string) bool
}

// New returns a lab over pool publishing through out. Run its Worker and
// feed its Handle from a runner (NewConsumer does both).
func New(pool *pgxpool.Pool, out Sender, opts Options, log zerolog.Logger) (*Lab, error) {
	opts = opts.withDefaults()
	l := &Lab{
		pool: pool, out: out, opts: opts, llm: opts.LLM,
		limit:   make(limiter, max(1, opts.Lab.Concurrency)),
		builder: chat.NewBuilder(),
		log:     log.With().Str("consumer", opts.Consumer).Logger(),
	}
	jo := opts.Job
	if jo.Heartbeat <= 0 && (jo.Lease <= 0 || jo.Lease > 3*defaultHeartbeat) {
		// A cancellation is seen at the next heartbeat: keep it within
		// about a second, whatever the lease.
		jo.Heartbeat = defaultHeartbeat
	}
	jo.Consumer, jo.Kinds = opts.Consumer, []string{jobKind}
	jo.Concurrency = max(1, opts.Lab.Workers)
	jo.MaxRunningPerTenant = max(1, opts.Lab.MaxRunning)
	jo.OnDone, jo.AfterDone = l.onDone, l.afterDone
	jo.Metrics = job.NewMetrics(opts.Registerer)
	w, err := job.NewWorker(pool, jo, l.run, log)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	l.worker = w
	return l, nil
}

// Worker is the lab's job worker: run it beside the runner.
func (l *Lab) Worker() *job.Worker { return l.worker }

// Consumer runs the lab in an agentq process with the process's
// configuration: AGENTQ_LAB_* and the LLM of AGENTQ_LLM_*.
var Consumer = NewConsumer(Options{})

// NewConsumer returns the lab as an app consumer. Zero fields of opts come
// from the process configuration.
func NewConsumer(opts Options) app.Consumer {
	opts = opts.withDefaults()
	return app.Consumer{Name: opts.Consumer, Run: func(ctx context.Context, d *app.Deps) error {
		o, err := FromConfig(opts, d.Config)
		if err != nil {
			return err
		}
		if o.Registerer == nil {
			o.Registerer = d.Registry
		}
		if o.Job.Grace <= 0 {
			o.Job.Grace = d.Config.ShutdownGrace
		}
		if err := database.EnsureFence(ctx, d.Pool, o.Consumer); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting: not a failure
			}
			return err
		}
		l, err := New(d.Pool, d.Outbox, o, d.Log)
		if err != nil {
			return err
		}
		if o.LLM == nil {
			d.Log.Warn().Str("consumer", o.Consumer).Msg("no model configured (AGENTQ_LLM_BASE_URL): every experiment is refused until one is")
		} else {
			d.Log.Info().Str("consumer", o.Consumer).Str("model", o.Model).Int("concurrency", o.Lab.Concurrency).
				Int("max_running", o.Lab.MaxRunning).Dur("timeout", o.Lab.Timeout).Msg("lab ready")
		}
		r, err := bus.NewRunner(d.JS, d.Schemas, l.HandleBatch, d.Config.Runner(o.Consumer, Subjects...), d.Log, d.Metrics)
		if err != nil {
			return err
		}
		stopServe, err := l.Serve(d.NC, ServeOptions{Validator: d.Schemas, Log: d.Log, Registry: d.Registry})
		if err != nil {
			return err
		}
		defer stopServe()
		werr := make(chan error, 1)
		go func() { werr <- l.worker.Run(ctx) }()
		sdone := l.startSchedule(ctx)
		return errors.Join(r.Run(ctx), <-werr, <-sdone)
	}}
}

// FromConfig completes opts from cfg: the lab settings when opts has
// none, and a chat client on cfg.LLM when opts has no LLM and
// cfg.LLM.BaseURL is set, each call bounded by AGENTQ_LAB_CALL_TIMEOUT.
func FromConfig(opts Options, cfg config.Config) (Options, error) {
	opts = opts.withDefaults()
	if opts.Lab == (config.Lab{}) {
		opts.Lab = cfg.Lab
	}
	if opts.Model == "" {
		opts.Model = strings.TrimSpace(cfg.LLM.Model)
	}
	if opts.LLM == nil && strings.TrimSpace(cfg.LLM.BaseURL) != "" {
		retries := cfg.LLM.MaxRetries
		if retries == 0 {
			retries = -1 // provider: 0 means its default, negative none
		}
		model := opts.Model
		if model == "" {
			model = "unnamed" // every request then names its model (checkRequest)
		}
		llm, err := provider.NewChat(provider.Options{
			BaseURL: cfg.LLM.BaseURL, Model: model, APIKey: cfg.LLM.APIKey,
			Timeout: opts.Lab.CallTimeout, MaxRPS: cfg.LLM.MaxRPS, MaxRetries: retries,
		})
		if err != nil {
			return opts, fmt.Errorf("lab: %w", err)
		}
		opts.LLM = llm
	}
	return opts, nil
}
