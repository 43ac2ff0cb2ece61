package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/health"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/rating"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/schemas"
)

func init() {
	register("migrate", "apply database migrations to AGENTQ_DATABASE_URL and exit", runMigrate)
	register("replay", "rebuild a consumer's derived state from the stream's first event", runReplay)
	register("healthcheck", "exit 0 when the process at AGENTQ_METRICS_ADDR reports healthy (for container healthchecks)", runHealthcheck)
}

// runHealthcheck asks a running binary's /healthz. Distroless images have no
// shell or curl, so compose runs this subcommand instead.
func runHealthcheck(ctx context.Context, e Env, cfg config.Config, _ zerolog.Logger, args []string) error {
	fs := flags("healthcheck", e)
	addr := fs.String("addr", cfg.MetricsAddr, "address of the process's metrics server")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	if *addr == "" {
		return errors.New("no address: set AGENTQ_METRICS_ADDR or --addr")
	}
	host := *addr
	if strings.HasPrefix(host, ":") {
		host = "127.0.0.1" + host
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("unhealthy: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("unhealthy: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprint(e.Stdout, string(body))
	return nil
}

func runMigrate(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	if err := flags("migrate", e).Parse(args); err != nil {
		return parseError(err)
	}
	dbURL, err := databaseURL(e, cfg)
	if err != nil {
		return err
	}
	if err := database.Migrate(ctx, dbURL, log); err != nil {
		return err
	}
	fmt.Fprintln(e.Stdout, "migrations applied")
	return nil
}

// rebuildTargets are the consumers agentq replay can rebuild.
// Each returns the target and what releases it.
var rebuildTargets = map[string]func(ctx context.Context, pool *pgxpool.Pool, cfg config.Config, log zerolog.Logger) (replay.Target, func(), error){
	"scorer": func(_ context.Context, pool *pgxpool.Pool, _ config.Config, log zerolog.Logger) (replay.Target, func(), error) {
		return quality.RebuildTarget(pool, quality.Options{}, log), func() {}, nil
	},
	"rater": func(_ context.Context, pool *pgxpool.Pool, cfg config.Config, log zerolog.Logger) (replay.Target, func(), error) {
		return rating.RebuildTarget(pool, rating.Options{Rater: cfg.Rater}, log), func() {}, nil
	},
	"degrader": func(_ context.Context, pool *pgxpool.Pool, cfg config.Config, log zerolog.Logger) (replay.Target, func(), error) {
		// Transitions live processing never published go to the outbox
		// for a running copy's relay; the rest were published already.
		out := outbox.New(pool, nil, log)
		return health.RebuildTarget(pool, out, health.Options{Params: health.ParamsFrom(cfg.Degrade)}, log), func() {}, nil
	},
	"indexer": func(ctx context.Context, pool *pgxpool.Pool, cfg config.Config, log zerolog.Logger) (replay.Target, func(), error) {
		emb, release, err := indexer.OpenEmbedders(ctx, cfg, log)
		if err != nil {
			return replay.Target{}, nil, err
		}
		return indexer.RebuildTarget(pool, emb, indexer.Options{}, log), release, nil
	},
	"lab": func(_ context.Context, pool *pgxpool.Pool, cfg config.Config, log zerolog.Logger) (replay.Target, func(), error) {
		opts, err := lab.FromConfig(lab.Options{}, cfg)
		if err != nil {
			return replay.Target{}, nil, err
		}
		t, err := lab.RebuildTarget(pool, opts, log)
		return t, func() {}, err
	},
}

// reratingRefusal is why a rebuild of the rater needs --yes-rerate.
const reratingRefusal = `rebuilding the rater re-rates every event with the rules (rules:v1): it replaces LLM ratings in its table, ` +
	`while the published tool.rated and prompt.rated events stay in the stream and the scorer keeps counting them; ` +
	`replay the scorer instead, or add --yes-rerate`

func runReplay(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("replay", e)
	consumer := fs.String("consumer", "", "consumer to rebuild: scorer, rater, indexer, degrader or lab (required)")
	tenant := fs.String("tenant", "", "rebuild only this tenant (default: every tenant)")
	yes := fs.Bool("yes", false, "confirm: the consumer's derived state is deleted, then rebuilt from the stream")
	truncated := fs.Bool("allow-truncated", false, "rebuild from what the stream still holds when its oldest events are gone, or it was deleted and created again since the consumer applied events")
	rerate := fs.Bool("yes-rerate", false, "rater only: confirm that every event is rated again, by the rules")
	fs.Usage = func() {
		fmt.Fprintln(e.Stderr, `usage: agentq replay --consumer scorer|rater|indexer|degrader|lab [--tenant T] --yes [--allow-truncated] [--yes-rerate]

Rebuilds a consumer's derived state from stream AGENTQ while traffic flows and
its copies keep running: the state is reset and the history re-applied by this
command, publishing nothing (results are already in the stream); live copies
withhold the tenant's results until the rebuild completes. The rater's results
of events live copies had not rated yet, and those they rate meanwhile, wait
in the outbox and are published once, by the relay, after the rebuild. The
indexer's live copies hold the tenant's new events back until then (its
decisions, such as the next free version, depend on the whole library), and
the rebuild follows the decisions its results recorded. The lab's rebuild
restores its read model of prompt versions; experiments stay as they are, and
no request or cancellation it decided is decided again. A database outage is
waited out (interrupt to give up); a rebuild that fails exits non-zero and
leaves the tenant's results withheld until it is run again. To re-embed after
a model change without a rebuild, use agentq reindex.`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	target, ok := rebuildTargets[*consumer]
	switch {
	case *consumer == "":
		fmt.Fprintln(e.Stderr, "agentq replay: --consumer is required")
		fs.Usage()
		return errUsage
	case !ok:
		fmt.Fprintf(e.Stderr, "agentq replay: cannot rebuild %q (rebuildable: scorer, rater, indexer, degrader, lab)\n", *consumer)
		return errUsage
	case *consumer == "rater" && !*rerate:
		fmt.Fprintf(e.Stderr, "agentq replay: %s\n", reratingRefusal)
		return errUsage
	case !*yes:
		fmt.Fprintf(e.Stderr, "agentq replay: add --yes to confirm: %s's state is deleted first, then rebuilt from the stream\n", *consumer)
		return errUsage
	}
	dbURL, err := databaseURL(e, cfg)
	if err != nil {
		return err
	}
	pool, err := database.Open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	cfg.NATSURL = natsURL(e, cfg)
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	reg, err := schemas.Load()
	if err != nil {
		return err
	}
	scope := "every tenant"
	if *tenant != "" {
		scope = "tenant " + *tenant
	}
	t, release, err := target(ctx, pool, cfg, log)
	if err != nil {
		return err
	}
	defer release()
	fmt.Fprintf(e.Stderr, "rebuilding %s for %s ...\n", *consumer, scope)
	last := time.Now()
	rep, err := replay.Rebuild(ctx, js, pool, reg, t, replay.Options{
		Tenant: *tenant, BatchSize: cfg.Runner(*consumer).BatchSize, MaxPayload: cfg.MaxPayload, AllowTruncated: *truncated, Log: log,
		Progress: func(done, total uint64) {
			if time.Since(last) >= time.Second {
				last = time.Now()
				fmt.Fprintf(e.Stderr, "  %d events read, up to stream sequence %d\n", done, total)
			}
		},
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "%s rebuilt for %s: %d events up to stream sequence %d in %s; nothing published\n",
		*consumer, scope, rep.Events, rep.Horizon, rep.Took.Round(time.Millisecond))
	if rep.Owed > 0 {
		fmt.Fprintf(e.Stdout, "  %d results live processing had not published wait in the outbox; running copies' relays publish them\n", rep.Owed)
	}
	for reason, n := range rep.Skipped {
		fmt.Fprintf(e.Stdout, "  %d events skipped (%s): the live consumer dead-letters them too\n", n, reason)
	}
	if rep.FirstSeq > 1 {
		fmt.Fprintf(e.Stdout, "  warning: the stream starts at sequence %d; earlier events were not replayed\n", rep.FirstSeq)
	}
	return nil
}
