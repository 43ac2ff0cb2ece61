package cli

import (
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentq/agentq/internal/config"
)

// The metrics server of the commands that serve HTTP on their own
// (ingest, mcp --http): /metrics and /healthz on AGENTQ_METRICS_ADDR, as
// a consumer's (app.MetricsHandler), so one scrape configuration and one
// healthcheck fit every agentq process.

// newRegistry is a registry with the Go and process collectors, which
// every agentq process serves.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// metricsHandler serves reg on /metrics and healthz on /healthz.
func metricsHandler(reg *prometheus.Registry, healthz http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("/healthz", healthz)
	return mux
}

// listenMetrics binds cfg.MetricsAddr; nil when metrics are off. It binds
// before the command says it serves, so a taken port is reported first.
func listenMetrics(cfg config.Config) (net.Listener, error) {
	if cfg.MetricsAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics address %s is not available (%v): set AGENTQ_METRICS_ADDR to a free host:port, or off", cfg.MetricsAddr, err)
	}
	return ln, nil
}
