package bus

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the runner's Prometheus instruments, labelled by consumer.
type Metrics struct {
	acks        *prometheus.CounterVec
	naks        *prometheus.CounterVec
	failures    *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	handleTime  *prometheus.HistogramVec
	batchSize   *prometheus.HistogramVec
}

// NewMetrics registers the runner's instruments with reg. Registering twice
// with the same registry returns the already registered instruments, so many
// runners in one process (agentq dev) can share a registry.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentq", Name: "events_acked_total",
			Help: "Events acked after their effect was committed (or found already applied).",
		}, []string{"consumer"}),
		naks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentq", Name: "events_nakked_total",
			Help: "Events negatively acked for a later retry after a transient error.",
		}, []string{"consumer"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentq", Name: "event_failures_total",
			Help: "Deliveries that failed for the event's own reasons (they count toward AGENTQ_MAX_DELIVER; outages do not).",
		}, []string{"consumer"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentq", Name: "events_dead_lettered_total",
			Help: "Events terminated and sent to AGENTQ_DLQ, by reason code.",
		}, []string{"consumer", "reason"}),
		handleTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentq", Name: "batch_handle_seconds",
			Help:    "Time to handle one batch, from handler call to its return.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"consumer"}),
		batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentq", Name: "batch_events",
			Help:    "Events per handled batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}, []string{"consumer"}),
	}
	if reg != nil {
		m.acks = Register(reg, m.acks)
		m.naks = Register(reg, m.naks)
		m.failures = Register(reg, m.failures)
		m.deadLetters = Register(reg, m.deadLetters)
		m.handleTime = Register(reg, m.handleTime)
		m.batchSize = Register(reg, m.batchSize)
	}
	return m
}

// Register registers c with reg and returns it, or returns the collector
// already registered under the same description, so that many components
// of one process (agentq dev runs every consumer) share one registry.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
