package bench

import (
	"context"
	"os"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/broker"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/devdb"
)

// embedded starts what every benchmark runs on: an embedded NATS server
// in a temporary directory, and the PGlite dev database when cfg names no
// database (pglite). It returns cfg pointed at them, metrics off, and what
// stops them.
func embedded(ctx context.Context, cfg config.Config) (_ config.Config, pglite bool, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	dir, err := os.MkdirTemp("", "agentq-bench-")
	if err != nil {
		return cfg, false, stop, err
	}
	stops = append(stops, func() { _ = os.RemoveAll(dir) })
	srv, err := broker.Start(broker.Options{Port: -1, StoreDir: dir, Log: zerolog.Nop()})
	if err != nil {
		return cfg, false, stop, err
	}
	stops = append(stops, srv.Shutdown)
	cfg.NATSURL, cfg.MetricsAddr = srv.ClientURL(), ""
	if cfg.DatabaseURL == "" {
		db, err := devdb.Start(ctx, devdb.Options{Dir: cfg.PGliteDir, Log: zerolog.Nop()})
		if err != nil {
			return cfg, false, stop, err
		}
		stops = append(stops, func() { _ = db.Close() })
		cfg.DatabaseURL, pglite = db.URL(), true
	}
	return cfg, pglite, stop, nil
}
