package rating

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/replay"
)

// Consumer runs the rater in an agentq process with the process's
// configuration: the LLM at AGENTQ_LLM_BASE_URL, or the rules when it is
// empty.
var Consumer = NewConsumer(Options{})

// NewConsumer returns the rater as an app consumer. Zero fields of opts
// are taken from the process configuration: the AGENTQ_RATER_* settings,
// and an LLM client for AGENTQ_LLM_* when AGENTQ_LLM_BASE_URL is set.
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
		if err := database.EnsureFence(ctx, d.Pool, o.Consumer); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting: not a failure
			}
			return err
		}
		r, err := New(d.Pool, d.Outbox, o, d.Log)
		if err != nil {
			return err
		}
		ro := r.RunnerOptions(d.Config.Runner(o.Consumer, Subjects...))
		if r.LLM() && ro.HandlerTimeout*4/5 < r.EventTimeout() {
			d.Log.Warn().Str("consumer", o.Consumer).Dur("handler_timeout", ro.HandlerTimeout).Dur("event_timeout", r.EventTimeout()).
				Msg("the handler timeout is shorter than one event's LLM work (AGENTQ_RATER_TIMEOUT x 2, x 3 with summaries, + 1s): slow calls will be cut off and retried; raise AGENTQ_RATER_HANDLER_TIMEOUT")
		}
		if r.LLM() {
			d.Log.Info().Str("consumer", o.Consumer).Str("model", o.Model).Int("concurrency", o.Rater.Concurrency).
				Int("batch", ro.BatchSize).Dur("timeout", o.Rater.Timeout).Float64("sample", o.Rater.Sample).
				Int64("daily_tokens", o.Rater.DailyTokens).Msg("rating with an LLM; rules:v1 for failed calls and fallbacks")
		} else {
			d.Log.Info().Str("consumer", o.Consumer).Str("rater", RulesRater).Float64("sample", o.Rater.Sample).
				Msg("no LLM configured (AGENTQ_LLM_BASE_URL): rating with the rules")
		}
		runner, err := bus.NewRunner(d.JS, d.Schemas, r.Handle, ro, d.Log, d.Metrics)
		if err != nil {
			return err
		}
		return runner.Run(ctx)
	}}
}

// FromConfig completes opts from cfg: the rater settings when opts has
// none, and an LLM client on cfg.LLM when opts has none and
// cfg.LLM.BaseURL is set. Each rating call is bounded by cfg.Rater.Timeout.
func FromConfig(opts Options, cfg config.Config) (Options, error) {
	opts = opts.withDefaults()
	if opts.Rater == (config.Rater{}) {
		opts.Rater = cfg.Rater
	}
	if opts.LLM == nil && strings.TrimSpace(cfg.LLM.BaseURL) != "" {
		if strings.TrimSpace(cfg.LLM.Model) == "" {
			return opts, fmt.Errorf("rater: AGENTQ_LLM_MODEL is required with AGENTQ_LLM_BASE_URL")
		}
		retries := cfg.LLM.MaxRetries
		if retries == 0 {
			retries = -1 // provider: 0 means its default, negative none
		}
		llm, err := provider.NewChat(provider.Options{
			BaseURL: cfg.LLM.BaseURL, Model: cfg.LLM.Model, APIKey: cfg.LLM.APIKey,
			Timeout: opts.Rater.Timeout, MaxRPS: cfg.LLM.MaxRPS, MaxRetries: retries,
		})
		if err != nil {
			return opts, fmt.Errorf("rater: %w", err)
		}
		opts.LLM, opts.Model = llm, cfg.LLM.Model
	}
	return opts, nil
}

// RunnerOptions adapts the runner's options to the rater: with an LLM, a
// batch holds no more events than Concurrency calls can rate, one after
// another at their timeout, within four fifths of the handler timeout.
// Events of a batch whose calls run slower than that are handed back
// unrated rather than cut off (see Handle), so a batch of slow calls is
// never abandoned half rated.
func (r *Rater) RunnerOptions(o bus.RunnerOptions) bus.RunnerOptions {
	if !r.LLM() || o.HandlerTimeout <= 0 {
		return o
	}
	call := r.opts.Rater.Timeout
	if r.opts.Rater.Summarize {
		call *= 2
	}
	rounds := max(1, int(o.HandlerTimeout*4/5/call))
	if limit := rounds * r.opts.Rater.Concurrency; o.BatchSize <= 0 || o.BatchSize > limit {
		o.BatchSize = limit
	}
	return o
}

// RebuildTarget is the rater as agentq replay rebuilds it: the rules
// rater (never an LLM: a rebuild must not spend tokens, and must give the
// same answers every time), publishing nothing. A rating the rebuild gives
// an event whose tool.rated / prompt.rated is not in the stream (live
// copies had not rated it yet) is stored in the outbox, and published
// after the rebuild (replay.Results). Pass the live rater's settings in
// opts.Rater (cfg.Rater), so the rebuild samples and skips as it did; zero
// settings take the AGENTQ_RATER_* defaults.
//
// A rebuild replaces every rating of the rebuilt tenants by the rules'
// rating of the same event — LLM ratings included, while the tool.rated
// events the LLM produced stay in the stream and the scorer keeps counting
// those. That is why agentq replay must refuse --consumer rater unless
// --yes-rerate is given, and say so: deployments with an LLM never want
// it; deployments on the rules get the same ratings back.
func RebuildTarget(pool *pgxpool.Pool, opts Options, log zerolog.Logger) replay.Target {
	opts = opts.withDefaults()
	opts.LLM, opts.Model = nil, ""
	if opts.Rater == (config.Rater{}) {
		opts.Rater = defaults()
	}
	results := replay.NewResults(ResultSubjects...)
	r := newRater(pool, results, opts, log)
	return replay.Target{
		Consumer: opts.Consumer,
		Subjects: Subjects,
		Reset: func(ctx context.Context, tx pgx.Tx, tenant string) error {
			return Reset(ctx, tx, opts.Consumer, tenant)
		},
		Handler: r.Handle,
		Results: results,
	}
}

// defaults are the AGENTQ_RATER_* settings of an empty environment.
func defaults() config.Rater {
	cfg, _ := config.Load(func(string) string { return "" })
	return cfg.Rater
}

// Compute returns the ratings the rules rater with settings s gives
// deliveries, applied in the order given, as the rater stores them (see
// List): what a rater with no LLM stores, computed without a database.
// Deliveries the rater dead-letters or skips have no rating.
func Compute(deliveries []*bus.Delivery, s config.Rater) []Stored {
	out := []Stored{}
	seen := map[string]bool{}
	for _, d := range deliveries {
		c, err := Decode(d)
		key := d.Tenant + "\x00" + d.Event.ID()
		if err != nil || seen[key] {
			continue
		}
		seen[key] = true
		switch {
		case c.LLMRating != nil && !s.Rerate, !Sampled(d.Tenant, d.Event.ID(), s.Sample), c.Success && !c.HasOutput:
			continue
		}
		rt := Rules(c)
		out = append(out, Stored{
			Tenant: d.Tenant, EventID: d.Event.ID(), StreamSeq: int64(d.StreamSeq),
			Target: c.Target, TargetKey: c.Key(), ToolName: c.ToolName, PromptHash: c.PromptHash,
			PromptID: c.PromptID, PromptVersion: c.Version,
			Rating: rt.Score(), Relevance: rt.Relevance, Correctness: rt.Correctness,
			RaterKind: rt.Kind, Rater: rt.Rater, Tokens: 0, InjectionSuspected: rt.Injection, Reason: reasonText(rt.Reason),
		})
	}
	return out
}
