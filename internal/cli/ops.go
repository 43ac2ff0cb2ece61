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
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/quality"
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
	if cfg.DatabaseURL == "" {
		return errors.New("AGENTQ_DATABASE_URL is not set")
	}
	if err := database.Migrate(ctx, cfg.DatabaseURL, log); err != nil {
		return err
	}
	fmt.Fprintln(e.Stdout, "migrations applied")
	return nil
}

// resetters delete a consumer's derived state for a tenant ("" = all).
var resetters = map[string]func(ctx context.Context, pool *pgxpool.Pool, tenant string) error{
	"scorer": func(ctx context.Context, pool *pgxpool.Pool, tenant string) error {
		return quality.Reset(ctx, pool, "scorer", tenant)
	},
}

func runReplay(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("replay", e)
	consumer := fs.String("consumer", "", "consumer to rebuild (scorer); required")
	tenant := fs.String("tenant", "", "rebuild only this tenant (default: every tenant)")
	yes := fs.Bool("yes", false, "confirm: the consumer's derived state is deleted first")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	reset, ok := resetters[*consumer]
	if !ok || !*yes {
		fmt.Fprintln(e.Stderr, "usage: agentq replay --consumer scorer [--tenant T] --yes")
		return errUsage
	}
	if cfg.DatabaseURL == "" {
		return errors.New("AGENTQ_DATABASE_URL is not set")
	}
	pool, err := database.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := reset(ctx, pool, *tenant); err != nil {
		return err
	}
	// Running copies of the consumer see it vanish, recreate it from the
	// first sequence and rebuild; the inbox skips other tenants' events.
	if err := js.DeleteConsumer(ctx, bus.StreamName, *consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("delete consumer %s: %w", *consumer, err)
	}
	scope := "every tenant"
	if *tenant != "" {
		scope = "tenant " + *tenant
	}
	fmt.Fprintf(e.Stdout, "%s reset for %s; running %s consumers rebuild it from the stream's first event\n", *consumer, scope, *consumer)
	return nil
}
