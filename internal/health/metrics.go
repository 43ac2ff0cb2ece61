package health

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// metrics count the transitions this copy folded.
type metrics struct {
	transitions *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentq", Name: "tool_health_transitions_total",
		Help: "Tool health transitions decided by the degrader, by tenant and state reached (sum over copies).",
	}, []string{"tenant", "from", "to"})}
	if reg != nil {
		if err := reg.Register(m.transitions); err != nil {
			if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
				m.transitions = are.ExistingCollector.(*prometheus.CounterVec)
			}
		}
	}
	return m
}

// observe counts and logs transitions: every one is a decision, warnings
// included (those are not published as events).
func (m *metrics) observe(log zerolog.Logger) func(string, []Transition) {
	return func(tenant string, trs []Transition) {
		for _, tr := range trs {
			m.transitions.WithLabelValues(tenant, string(tr.From), string(tr.To)).Inc()
			lvl := log.Info()
			if tr.To == Warning {
				lvl = log.Warn()
			}
			lvl.Str("tenant", tenant).Str("tool", tr.Tool).Str("from", string(tr.From)).Str("to", string(tr.To)).
				Float64("quality", tr.Quality).Float64("evidence", tr.Evidence).Int64("version", tr.Version).
				Str("reason", tr.Reason).Msg("tool health")
		}
	}
}

// StateCollector exports every tool's health state from the database at
// scrape time, so every copy reports the same, whole picture:
// agentq_tool_health{tenant,tool,state} is 1 for the state the tool is in
// and 0 for the others.
type StateCollector struct {
	pool *pgxpool.Pool
	desc *prometheus.Desc
}

// NewStateCollector returns the collector over pool.
func NewStateCollector(pool *pgxpool.Pool) *StateCollector {
	return &StateCollector{pool: pool, desc: prometheus.NewDesc("agentq_tool_health",
		"Tool health state (1 for the state the tool is in): healthy, warning, degraded, quarantined, probation.",
		[]string{"tenant", "tool", "state"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := c.pool.Query(ctx, `SELECT tenant_id, tool_name, state FROM health_tools ORDER BY tenant_id, tool_name LIMIT 100000`)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var tenant, tool, state string
		if err := rows.Scan(&tenant, &tool, &state); err != nil {
			ch <- prometheus.NewInvalidMetric(c.desc, err)
			return
		}
		for _, s := range []State{Healthy, Warning, Degraded, Quarantined, Probation} {
			v := 0.0
			if State(state) == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, tenant, tool, string(s))
		}
	}
}
